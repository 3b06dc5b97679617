"""Storage faults end to end on the sandbox (members on faultfs), checked against the members'
own event logs: the catalog experiments at test speed (1 s elections, shorter faults)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from rsdrill.history import History
from rsdrill.sandbox.cluster import EmulatorEngine, up
from rsdrill.sandbox.config import Settings, build_topology, member_dir
from rsdrill.sandbox.groundtruth import all_events, first_after
from tests.e2e.catalog import changed
from tests.e2e.storage import injected_mono, run
from tests.harness.cli import rsdrill_run

pytest_plugins = ["tests.integration.faultfs_fixtures"]
pytestmark = pytest.mark.usefixtures("no_faultfs_mount_left")


FAST = {"target.election_timeout": "1s", "faults.0.duration": "4s", "observe.after_revert": "15s"}


@pytest.mark.parametrize("name", ["primary-journal-eio", "primary-volume-detach"])
def test_storage_failure_kills_the_primary_like_mongod_and_the_set_fails_over(
    tmp_path: Path, name: str
) -> None:
    spec = changed(name, **FAST)
    spec["slo"] = {"failover_s": "<= 4", "recovery_s.max": "<= 15",
                   "lost_acknowledged_writes": "== 0"}  # fmt: skip
    result = run(tmp_path, spec)
    assert result.verdict == "pass", (result.error, result.slo)
    victim = result.faults[0].target
    sandbox = tmp_path / "out" / "sandbox"
    fatal = first_after(sandbox, "fatal", injected_mono(result), member=victim)
    assert fatal is not None and "disk I/O error" in fatal["error"], fatal
    assert fatal["state"] == "PRIMARY"
    assert result.faults[0].detail["operations"]["failed"] >= 1  # what the rule did, reported
    writable = first_after(sandbox, "writable", injected_mono(result), other_than=victim)
    assert writable is not None
    truth = writable["t_mono"] - injected_mono(result)
    m = result.metrics
    assert m.failover_s is not None and abs(m.failover_s - truth) < 0.2, (m.failover_s, truth)
    assert m.lost_acknowledged_writes == 0
    # Restarted after the revert on its kept data, it is a member again.
    assert m.recovery_s[victim] is not None
    assert [s for _, s in m.member_states[victim]][-1] == "SECONDARY"


def test_rs1_disk_fault_on_diagnostics_is_ridden_out(tmp_path: Path) -> None:
    spec = changed("rs1-disk-fault-tolerated", **{"faults.0.duration": "4s",
                    "faults.1.duration": "4s", "observe.after_revert": "2s"})  # fmt: skip
    result = run(tmp_path, spec)
    assert result.verdict == "pass", (result.error, result.slo)
    member = result.faults[0].target
    events = all_events(tmp_path / "out" / "sandbox")
    errors = [e for e in events if e["event"] == "diagnostics_error"]
    # About one failed sample a second while the fault lasted, and the member never died.
    assert 2 <= len(errors) <= 6, errors
    assert all("Input/output error" in e["error"] for e in errors)
    assert result.faults[0].detail["operations"]["failed"] >= len(errors)
    assert not [e for e in events if e["event"] in ("fatal", "shutdown") and e["t_mono"] <
                injected_mono(result) + 4]  # fmt: skip
    assert [s for _, s in result.metrics.member_states[member]] == ["PRIMARY"]
    assert (result.metrics.acknowledged_writes or 0) > 50


def test_a_slow_journal_fsync_holds_up_journaled_writes_and_not_reads(tmp_path: Path) -> None:
    # As mongod, whose reads go on beside its journal flush: every fsync of the only member's
    # files takes 300 ms more for 3 s. Its w:majority writes are journaled, so each waits for a
    # flush; its reads wait for none, though the member commits every 100 ms and each commit
    # is then on the disk 300 ms (before the log was synced outside the lock reads take,
    # they waited for it: 0.2-0.3 s each).
    spec = {
        "name": "slow-fsync",
        "target": {"platform": "sandbox", "topology": "rs1"},
        "probes": {"availability": {"interval": "20ms", "timeout": "2s",
                                    "write_concern": "majority"}},
        "faults": [{"at": "2s", "kind": "disk-fault", "select": "primary", "errno": "none",
                    "latency": "300ms", "operations": ["fsync"], "duration": "3s"}],
        "observe": {"after_revert": "1s"},
    }  # fmt: skip
    result = run(tmp_path, spec)
    assert result.exit_code == 0, result.error
    fault = result.faults[0]
    assert fault.verified_at_s is not None and fault.reverted_at_s is not None
    ops = History.read_jsonl(tmp_path / "out" / "history.jsonl").ops()
    # From a commit's length after the rule is in force, to its revert.
    during = [o for o in ops if fault.verified_at_s + 0.4 <= o.t_start <= fault.reverted_at_s - 0.4]
    writes = sorted(o.t_end - o.t_start for o in during if o.probe == "write" and o.ok)
    reads = sorted(o.t_end - o.t_start for o in during if o.probe == "read" and o.ok)
    assert writes and reads and len(reads) == len([o for o in during if o.probe == "read"])
    assert writes[len(writes) // 2] >= 0.3, writes  # the fault took: a flush each
    assert reads[-1] < 0.15, reads


def test_local_member_on_faultfs_mounted_with_the_cli(
    tmp_path: Path, free_port_base: Callable[[int], int]
) -> None:
    """platform: local: the user mounts each dbpath with `rsdrill faultfs mount` before the
    members start and names the mount in `faultfs`; the fault and the restart go through it."""
    directory = tmp_path / "set"
    spec = build_topology("rs3", port_base=free_port_base(3),
                          settings=Settings(election_timeout_ms=1000))  # fmt: skip
    dbpaths = [member_dir(directory.resolve(), m) / "data" for m in spec.members]

    def mount_with_cli() -> None:
        for data in dbpaths:
            data.mkdir(parents=True)
            done = rsdrill_run(
                ["faultfs", "mount", str(data),
                 str(data)], capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr

    sandbox = up(directory, spec, EmulatorEngine(), before_start=mount_with_cli)
    try:
        members = [
            {"host": m.host, "dbpath": str(data), "faultfs": str(data),
             "start": " ".join(EmulatorEngine().argv(sandbox, m, init=False))}
            for m, data in zip(spec.members, dbpaths, strict=True)
        ]  # fmt: skip
        result = run(tmp_path, {
            "name": "local-journal-eio",
            "target": {"platform": "local", "topology": "rs3", "members": members,
                       "uri": sandbox.uri},
            "faults": [{"at": "2s", "kind": "disk-fault", "select": "primary",
                        "operations": ["fsync"], "duration": "3s"}],
            "observe": {"after_revert": "15s"},
        })  # fmt: skip
        assert result.verdict == "pass", result.error
        victim = result.faults[0].target
        assert first_after(directory, "fatal", injected_mono(result), member=victim)
        assert result.metrics.recovery_s[victim] is not None
    finally:
        sandbox.down(grace_s=2.0)
        for data in dbpaths:
            rsdrill_run(["faultfs", "unmount",
                            str(data)], capture_output=True, timeout=60)  # fmt: skip
