"""`rsdrill run` with a network-partition on the sandbox: the isolated primary steps down and
the majority elects; after a SIGKILLed run, `rsdrill recover` removes the rules it left."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from rsdrill.engine.options import RunOptions
from rsdrill.engine.runner import run_experiment
from rsdrill.experiment.schema import Experiment
from rsdrill.platforms.machine import netcls
from rsdrill.platforms.machine.network import rsdrill_tables
from rsdrill.sandbox.cluster import EmulatorEngine, Sandbox, up
from rsdrill.sandbox.config import Settings, build_topology
from tests.e2e.test_run_cli import _wait_for_text
from tests.harness.cli import Rsdrill, rsdrill_run

INSTALL = Path(__file__).resolve().parents[2] / ".ci" / "install-netfilter"


@pytest.fixture(autouse=True)
def nft() -> None:
    if shutil.which("nft") is None:
        subprocess.run([str(INSTALL)], check=True, timeout=300)
    assert shutil.which("nft"), f"{INSTALL} did not install nft"


def _experiment(tmp_path: Path, port_base: int, duration: str) -> Path:
    path = tmp_path / "minority.yaml"
    path.write_text(
        "name: minority-partition-fast\n"
        "target: {platform: sandbox, topology: rs3, election_timeout: 2s, "
        f"heartbeat_interval: 500ms, port_base: {port_base}}}\n"
        "probes:\n"
        "  availability: {interval: 20ms, timeout: 250ms, write_concern: majority, "
        "retries: false}\n"
        "  durability: {write_concern: majority}\n"
        "faults:\n"
        "  - {at: 2s, kind: network-partition, select: primary, isolate_from: members, "
        f"duration: {duration}}}\n"
        "observe: {after_revert: 5s}\n"
        "slo:\n  lost_acknowledged_writes: '== 0'\n"
    )
    return path


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "RSDRILL_HOME": str(tmp_path / "home")}


def _our_tables(port_base: int) -> list[str]:
    prefixes = tuple(f"rsdrill-{port_base + i}-" for i in range(3))
    return [t for t in rsdrill_tables() if t.startswith(prefixes)]


@pytest.mark.slow
def test_minority_partition_isolated_primary_steps_down_majority_elects(
    tmp_path: Path, free_port_base: Callable[[int], int]
) -> None:
    base = free_port_base(3)
    out = tmp_path / "out"
    done = rsdrill_run(
        ["run", str(_experiment(tmp_path, base, "6s")), "--out", str(out),
         "--no-live", "--no-history"],
        capture_output=True, text=True, timeout=120, env=_env(tmp_path),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads((out / "result.json").read_text())
    fault = result["faults"][0]
    old = fault["target"]
    injected, reverted = fault["injected_at_s"], fault["reverted_at_s"]
    states = result["metrics"]["member_states"]
    # The old primary became SECONDARY while cut off: within electionTimeout (2 s) plus the
    # liveness check's period and the probes' polling.
    stepdown = [t for t, s in states[old] if s == "SECONDARY" and injected < t < reverted]
    assert stepdown and stepdown[0] - injected < 4.0, states[old]
    # A member of the majority side was elected while the partition lasted.
    elected = [(h, t) for h, seen in states.items() if h != old
               for t, s in seen if s == "PRIMARY" and injected < t < reverted]  # fmt: skip
    assert elected, states
    assert result["metrics"]["failover_s"] is not None
    assert result["metrics"]["lost_acknowledged_writes"] == 0
    events = (out / "sandbox" / "members" / old.rsplit(":", 1)[1] / "events.jsonl").read_text()
    assert "cannot see a majority of voting members" in events
    assert not _our_tables(base)


@pytest.mark.slow
def test_recover_removes_the_rules_of_a_killed_run(
    tmp_path: Path, free_port_base: Callable[[int], int]
) -> None:
    base = free_port_base(3)
    proc = Rsdrill(
        ["run", str(_experiment(tmp_path, base, "60s")), "--out",
         str(tmp_path / "out"), "--no-live", "--no-history"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env(tmp_path),
    )  # fmt: skip
    try:
        _wait_for_text(proc, "injected network-partition", 60)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        assert _our_tables(base), "the killed run's partition should still be in force"
        recover = rsdrill_run(["recover"], capture_output=True, text=True,
                              timeout=120, env=_env(tmp_path))  # fmt: skip
        assert recover.returncode == 0, recover.stdout + recover.stderr
        assert "partition healed" in recover.stdout
        assert not _our_tables(base)
        assert not {base, base + 1, base + 2} & set(netcls.tagged_ports())
        again = rsdrill_run(["recover"], capture_output=True, text=True,
                            timeout=60, env=_env(tmp_path))  # fmt: skip
        assert again.stdout.startswith("nothing to recover"), again.stdout + again.stderr
    finally:
        if proc.poll() is None:
            proc.kill()
        Sandbox(tmp_path / "out" / "sandbox").down(grace_s=1.0)


@pytest.mark.slow
def test_local_platform_partitions_running_processes_without_restarting_them(
    tmp_path: Path, free_port_base: Callable[[int], int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`platform: local`: members started outside rsdrill, found by their ports, tagged while
    they run (their open connections included) and untagged afterwards."""
    monkeypatch.setenv("RSDRILL_ALLOW", "rs0")
    spec = build_topology(
        "rs3", port_base=free_port_base(3), settings=Settings(election_timeout_ms=1000)
    )
    sandbox = up(tmp_path / "existing", spec, EmulatorEngine())
    try:
        pids = {m.host: sandbox.pid(m) for m in spec.members}
        members = [{"host": m.host, "start": "false"} for m in spec.members]
        uri = "mongodb://" + ",".join(pids) + "/?replicaSet=rs0"
        experiment = Experiment.model_validate({
            "name": "local-minority-partition",
            "target": {"platform": "local", "topology": "rs3", "uri": uri, "members": members},
            "faults": [{"at": "2s", "kind": "network-partition", "select": "primary",
                        "duration": "4s"}],
            "observe": {"after_revert": "10s"},
            "slo": {"lost_acknowledged_writes": "== 0"},
        })  # fmt: skip
        result = run_experiment(
            experiment, RunOptions(out_dir=tmp_path / "out", live=False, journal_dir=tmp_path)
        )
        assert result.verdict == "pass", result.error
        assert result.metrics.failover_s is not None and result.metrics.failover_s < 4
        assert {m.host: sandbox.pid(m) for m in spec.members} == pids  # nothing restarted
        assert not _our_tables(spec.members[0].port)
        assert not {m.port for m in spec.members} & set(netcls.tagged_ports())
    finally:
        sandbox.down(grace_s=2.0)
