"""vSAN's capacity-disk failure, measured on the sandbox (experiments/vsan-disk-ftt1.yaml and
vsan-disk-ftt0.yaml at test speed): with each member's data on two copies (FTT=1) one failing
copy interrupts nothing and is resynced on revert, both copies equal afterwards; without the
second copy (FTT=0) the same failure ends the member and writes stop. A SIGKILLed run's copy
failure is cleared and resynced by `rsdrill recover`."""

from __future__ import annotations

import hashlib
import itertools
import json
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from rsdrill.faultfs.mirror import MIRROR_FILE
from rsdrill.faultfs.mount import faultfs_mounts
from rsdrill.sandbox.cluster import Sandbox
from rsdrill.sandbox.groundtruth import first_after
from tests.e2e.catalog import changed
from tests.e2e.storage import injected_mono, run
from tests.e2e.test_run_cli import _recover, _start, _wait_for_text
from tests.harness.members import wait_until

# 1 s elections, a 4 s fault: the catalog's experiments at test speed.
FAST = {"target.election_timeout": "1s", "faults.0.at": "3s", "faults.0.duration": "4s",
        "observe.after_revert": "4s"}  # fmt: skip


pytest_plugins = ["tests.integration.faultfs_fixtures"]
pytestmark = pytest.mark.usefixtures("no_faultfs_mount_left")


def tree(root: Path) -> dict[str, str]:
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        if path.is_file() else "dir"
        for path in sorted(root.rglob("*"))
    }  # fmt: skip


def _experiment(name: str, topology: str, **changes: Any) -> dict[str, Any]:
    spec = changed(name, **{**FAST, "target.topology": topology, **changes})
    del spec["matrix"]
    return spec


def _writes(out: Path) -> list[dict[str, Any]]:
    """The write probe's attempts, from the run's history."""
    history = (out / "history.jsonl").read_text().splitlines()
    return [op for op in map(json.loads, history) if op["probe"] == "write"]


def _longest_windows(writes: list[dict[str, Any]], result: Any) -> list[tuple[float, float]]:
    """The three longest windows between successful writes: (seconds, its start from the
    fault's injection), for a failure to say whether the fault or the machine made them."""
    ends = sorted(op["t_end"] for op in writes if op["outcome"] == "ok")
    since = result.faults[0].injected_at_s or 0.0
    windows = sorted((b - a, a - since) for a, b in itertools.pairwise(ends))
    return [(round(w, 3), round(at, 2)) for w, at in windows[-3:]]


@pytest.mark.parametrize("topology", ["rs1", "rs3"])
def test_ftt1_one_copy_failing_interrupts_nothing_and_is_resynced(
    tmp_path: Path, topology: str
) -> None:
    # The file's bound, 0.5 s, is the write probe's floor on a machine at rest (an interval and
    # one majority write); a loaded one lifts the floor itself, everywhere in the run: four rs3
    # runs at once here had windows of 0.15-0.26 s before, during and after the fault alike, and
    # CI had one of 0.66 s. "No interruption" is no failed write (checked below, with writes in
    # every half second of the fault), and the window is held to this test's 1 s.
    spec = _experiment("vsan-disk-ftt1", topology, **{"slo.write_unavailable_s": "<= 1.0"})
    result = run(tmp_path, spec)
    out = tmp_path / "out"
    writes = _writes(out)
    assert result.verdict == "pass", (result.error, result.slo, _longest_windows(writes, result))
    # No interruption, measured: not one write failed, writes succeeded in every half second
    # of the fault (however many a loaded machine fits in: 150 in all in CI, 550 idle), and
    # the longest window between two successful writes stays at the probe's floor.
    assert all(op["outcome"] == "ok" for op in writes), len(writes)
    fault = result.faults[0]
    assert fault.injected_at_s is not None and fault.reverted_at_s is not None
    slices = {int((op["t_end"] - fault.injected_at_s) / 0.5) for op in writes
              if fault.injected_at_s <= op["t_end"] < fault.reverted_at_s}  # fmt: skip
    whole = set(range(int((fault.reverted_at_s - fault.injected_at_s) / 0.5)))
    assert whole <= slices, sorted(whole - slices)
    m = result.metrics
    assert m.write_unavailable_s is not None and m.write_unavailable_s <= 1.0, m
    assert m.lost_acknowledged_writes == 0 and m.failover_s is None
    primary = result.faults[0].target
    assert [s for _, s in m.member_states[primary]] == ["PRIMARY"]
    assert first_after(out / "sandbox", "fatal", 0, member=primary) is None
    # The copy was degraded by its first failed operation, then resynced on revert.
    detail = result.faults[0].detail
    assert detail["operations"]["failed"] >= 1
    replica = detail["replica"]
    assert replica["name"] == "a" and replica["state"] == "in-sync", replica
    assert replica["error"] == "Input/output error" and replica["degraded_at"] is not None
    resync = replica["resync"]
    assert resync["from"] == "b" and 0 < resync["seconds"] < 60 and resync["bytes"] > 0
    assert resync["held_s"] <= resync["seconds"]
    # Intact after the resync: the two copies of every member's data are the same files.
    for member in (out / "sandbox" / "members").iterdir():
        a, b = tree(member / "data"), tree(member / "data-b")
        assert a == b and len(a) >= 2, (member, a, b)


@pytest.mark.parametrize(("topology", "at_least_s"), [("rs1", 3.0), ("rs3", 1.0)])
def test_ftt0_the_same_failure_ends_the_member(
    tmp_path: Path, topology: str, at_least_s: float
) -> None:
    result = run(tmp_path, _experiment("vsan-disk-ftt0", topology))
    assert result.verdict == "fail", (result.error, result.slo)  # the <= 0.5 SLO, on purpose
    m = result.metrics
    # rs1: nothing serves until the revert restarts the member (the fault's 4 s); rs3: until
    # the secondaries elect after their 1 s election timeout.
    assert m.write_unavailable_s is not None and m.write_unavailable_s > at_least_s, m
    # rs1: writes fail until the restart. rs3: a write that waits in pymongo's server selection
    # (up to the probe's 1 s timeout) through a ~1 s election succeeds on the new primary, so
    # whether one fails depends on where the ticks fall (under load none did, gap 1.2 s).
    if topology == "rs1":
        assert any(op["outcome"] != "ok" for op in _writes(tmp_path / "out"))
    victim = result.faults[0].target
    fatal = first_after(tmp_path / "out" / "sandbox", "fatal", injected_mono(result),
                        member=victim)  # fmt: skip
    assert fatal is not None and "disk I/O error" in fatal["error"], fatal
    assert "replica" not in result.faults[0].detail
    assert m.lost_acknowledged_writes == 0


def test_a_killed_runs_copy_resyncs_online_and_recover_ends_it_with_equal_copies(
    tmp_path: Path, free_port_base: Callable[[int], int]
) -> None:
    """The run dies with copy a failed: the member keeps running on the mount, which clears its
    rules and resyncs a online (a detached mount would have let the member's next files land on
    a alone); `rsdrill recover` stops the member, then unmounts: both copies equal."""
    spec = _experiment("vsan-disk-ftt1", "rs1", **{"faults.0.duration": "120s",
                       "target.port_base": free_port_base(1)})  # fmt: skip
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(spec))
    out = tmp_path / "out"
    proc = _start(tmp_path, path)
    try:
        _wait_for_text(proc, "injected disk-fault", 90)
        (member,) = (out / "sandbox" / "members").iterdir()
        record = member / MIRROR_FILE
        wait_until(lambda: '"degraded"' in record.read_text(), 10, "copy a degraded")
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        journal = next((tmp_path / "home").rglob("*.jsonl")).read_text()
        assert '"mirror": {"replica": "a"' in journal, journal  # journaled before it was set
        wait_until(lambda: '"degraded"' not in record.read_text(), 30, "copy a resynced")
        assert faultfs_mounts(out / "sandbox"), "the member's mount stays while it runs"
        recover = _recover(tmp_path, timeout=180)
        assert recover.returncode == 0, recover.stdout + recover.stderr
        assert "no rule to clear; replica a in sync" in recover.stdout, recover.stdout
        assert "stopped 1 member process(es); unmounted 1 faultfs" in recover.stdout
        assert not faultfs_mounts(out / "sandbox")
        assert not Sandbox(out / "sandbox").running()
        replicas = json.loads(record.read_text())["replicas"]
        assert replicas["a"]["state"] == replicas["b"]["state"] == "in-sync", replicas
        assert tree(member / "data") == tree(member / "data-b")
        again = _recover(tmp_path, timeout=60)
        assert again.stdout.startswith("nothing to recover"), again.stdout
    finally:
        if proc.poll() is None:
            proc.kill()
        if (out / "sandbox" / "members").exists():
            Sandbox(out / "sandbox").down()
