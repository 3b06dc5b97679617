"""`rsdrill run` end to end on the sandbox, checked against the sandbox's own event logs."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from rsdrill.engine import runner
from rsdrill.engine.journal import read_records
from rsdrill.engine.options import RunOptions
from rsdrill.engine.runner import run_experiment
from rsdrill.experiment.schema import Experiment
from rsdrill.history import History
from rsdrill.platforms.machine.local_hosts import listening_pid
from rsdrill.result import Result
from rsdrill.sandbox.groundtruth import first_after
from tests.e2e.local_set import local_target


def _run(tmp_path: Path, spec: dict[str, Any], journal_dir: Path | None = None) -> Result:
    experiment = Experiment.model_validate(spec)
    out = tmp_path / "out"
    return run_experiment(
        experiment, RunOptions(out_dir=out, live=False, journal_dir=journal_dir or tmp_path)
    )


def _kill_mono(result: Result, index: int = 0) -> float:
    assert result.clock is not None
    injected = result.faults[index].injected_at_s
    assert injected is not None
    return result.clock.t0_monotonic + injected


def _failover_gap(out: Path, probes: set[str], killed_at_s: float, killed: str) -> float:
    """The window without a successful op of `probes` that the failover made: it ends at the
    first success after the kill on another member (a reply the killed member sent just before
    the kill may still be read after it) and starts at the success before that."""
    ok = [o for o in History.read_jsonl(out / "history.jsonl").ops() if o.probe in probes and o.ok]
    end = min(o.t_end for o in ok if o.t_end > killed_at_s and o.member != killed)
    return end - max(o.t_end for o in ok if o.t_end < end)


def test_primary_kill_measures_failover_like_the_ground_truth(tmp_path: Path) -> None:
    result = _run(tmp_path, {
        "name": "fast-primary-kill",
        "target": {"platform": "sandbox", "topology": "rs3", "election_timeout": "1s"},
        "faults": [{"at": "3s", "kind": "host-kill", "select": "primary", "duration": "4s"}],
        "observe": {"after_revert": "20s"},
        "slo": {"write_unavailable_s": "<= 5", "lost_acknowledged_writes": "== 0"},
    })  # fmt: skip
    assert result.verdict == "pass", result.error
    assert result.exit_code == 0
    killed = result.faults[0].target
    sandbox = tmp_path / "out" / "sandbox"
    writable = first_after(sandbox, "writable", _kill_mono(result), other_than=killed)
    assert writable is not None
    truth = writable["t_mono"] - _kill_mono(result)
    m = result.metrics
    assert m.failover_s is not None and abs(m.failover_s - truth) < 0.1, (m.failover_s, truth)
    # The metrics are the run's longest gaps; the kill's own is checked against the truth (on a
    # loaded machine a stall elsewhere in the run may be longer, and then is the metric).
    # The gap may begin after `injected_at_s`: the member dies between then and `applied_at_s`
    # (the kill's call returned), and a write it acknowledged meanwhile ends the gap's start
    # later (a loaded machine: 4 ms less than the truth from injected_at_s). From applied_at_s
    # the truth is a floor.
    killed_at, applied_at = result.faults[0].injected_at_s or 0.0, result.faults[0].applied_at_s
    assert applied_at is not None and result.clock is not None
    floor = writable["t_mono"] - (result.clock.t0_monotonic + applied_at)
    gap = _failover_gap(tmp_path / "out", {"write"}, killed_at, killed)
    assert floor <= gap <= truth + 0.5, (gap, floor, truth)
    assert m.write_unavailable_s is not None and m.write_unavailable_s >= gap
    # The server's own gap (rsdrill's wire client): the election plus a majority commit.
    raw = _failover_gap(tmp_path / "out", {"write", "raw_write"}, killed_at, killed)
    assert floor <= raw <= truth + 0.5, (raw, floor, truth)
    assert m.raw_write_unavailable_s is not None and m.raw_write_unavailable_s >= raw
    assert m.lost_acknowledged_writes == 0 and (m.acknowledged_writes or 0) > 50
    assert m.recovery_s[killed] is not None and m.recovery_s[killed] < 5
    states = [s for _, s in m.member_states[killed]]
    assert "DOWN" in states and states[-1] == "SECONDARY"
    saved = json.loads((tmp_path / "out" / "result.json").read_text())
    assert saved["schema"] == "rsdrill.result/v1" and saved["verdict"] == "pass"
    # The result says what was measured: rsdrill's emulator, not mongod.
    server = saved["target"]["server"]
    assert server["emulator"] is True and server["topology"] == "replica set"
    assert (server["handshake"], server["set_name"], server["tls"]) == ("hello", "rs0", False)
    assert server["version"] and server["auth_mechanism"] is None
    for name in ("junit.xml", "report.html", "summary.md", "history.jsonl"):
        assert (tmp_path / "out" / name).stat().st_size > 0


def test_a_fault_on_the_primary_during_an_election_waits_for_the_new_one(tmp_path: Path) -> None:
    """The second fault selects the primary 0.2 s after the first killed it, while the set has
    none: it goes in on the member elected next, and the rest of the timeline slides by the
    wait (its hold is as long as the file says)."""
    result = _run(tmp_path, {
        "name": "primary-during-election",
        "target": {"platform": "sandbox", "topology": "rs3", "election_timeout": "1s"},
        "probes": {"failover": {"interval": "20ms"}},
        "faults": [
            {"at": "3s", "kind": "host-kill", "select": "primary", "duration": "6s"},
            {"at": "3.2s", "kind": "host-freeze", "select": "primary", "duration": "1s"},
        ],
        "observe": {"after_revert": "10s"},
        "guards": {"allow_quorum_loss": True},  # the new primary frozen while the old is down
    })  # fmt: skip
    assert result.verdict == "pass", result.error
    killed, frozen = result.faults
    assert frozen.target != killed.target
    sandbox = tmp_path / "out" / "sandbox"
    assert result.clock is not None
    writable = first_after(sandbox, "writable", _kill_mono(result), other_than=killed.target)
    assert writable is not None and writable["member"] == frozen.target, writable
    elected_s = writable["t_mono"] - result.clock.t0_monotonic
    assert frozen.injected_at_s is not None and frozen.reverted_at_s is not None
    assert frozen.injected_at_s >= elected_s - 0.5, (frozen.injected_at_s, elected_s)
    assert frozen.reverted_at_s - frozen.injected_at_s >= 0.9
    # The result says so: the second fault was due once the wait ended, the kill's revert later
    # by as much; the first fault, before any wait, at its offset.
    assert killed.due_at_s == 3.0, killed
    assert frozen.due_at_s is not None and frozen.due_at_s - 3.2 >= 0.5, frozen
    assert frozen.due_at_s <= frozen.injected_at_s, frozen
    assert killed.revert_due_at_s is not None
    assert killed.revert_due_at_s >= 9.0 + (frozen.due_at_s - 3.2) - 0.001, (killed, frozen)


def test_failed_slo_gives_verdict_fail_and_exit_1(tmp_path: Path) -> None:
    result = _run(tmp_path, {
        "name": "impossible-slo",
        "target": {"platform": "sandbox", "topology": "rs3", "election_timeout": "1s"},
        "faults": [{"at": "2s", "kind": "host-kill", "select": "primary", "duration": "2s"}],
        "observe": {"after_revert": "10s"},
        "slo": {"write_unavailable_s": "<= 0.05"},
    })  # fmt: skip
    assert (result.verdict, result.exit_code) == ("fail", 1)
    assert result.slo[0].passed is False and (result.slo[0].observed or 0) > 0.05


def test_an_analyzer_that_raises_still_tears_down_and_leaves_a_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_analyzer(*args: object, **kwargs: object) -> None:
        raise ZeroDivisionError("an analyzer's bug")

    monkeypatch.setattr("rsdrill.analysis.metrics.compute_metrics", broken_analyzer)
    journals = tmp_path / "journal"
    result = _run(tmp_path, {
        "name": "broken-analyzer",
        "target": {"platform": "sandbox", "topology": "rs1"},
        "faults": [{"at": "1s", "kind": "host-kill", "duration": "1s"}],
        "observe": {"after_revert": "5s"},
        "guards": {"allow_quorum_loss": True},
        "slo": {"write_unavailable_s": "<= 60"},
    }, journal_dir=journals)  # fmt: skip
    assert (result.verdict, result.exit_code) == ("error", 4)
    assert result.error is not None and "an analyzer's bug" in result.error
    saved = json.loads((tmp_path / "out" / "result.json").read_text())
    assert (saved["verdict"], saved["faults"][0]["kind"]) == ("error", "host-kill")
    assert saved["faults"][0]["reverted_at_s"] is not None
    # Torn down (the sandbox's members are gone) and the journal ended: nothing for `recover`.
    ports = [int(member.rsplit(":", 1)[1]) for member in result.target.members]
    assert ports and all(listening_pid(port) is None for port in ports)
    (journal,) = journals.glob("*.jsonl")
    assert [r["verdict"] for r in read_records(journal) if r["type"] == "end"] == ["error"]


def test_rs1_kill_with_restart_delay(tmp_path: Path) -> None:
    delay = 3.0
    result = _run(tmp_path, {
        "name": "rs1-kill",
        "target": {"platform": "sandbox", "topology": "rs1"},
        "faults": [{"at": "2s", "kind": "host-kill", "restart": {"after": f"{delay}s"}}],
        "observe": {"after_revert": "20s"},
        "guards": {"allow_quorum_loss": True},
    })  # fmt: skip
    assert result.verdict == "pass", result.error
    member = result.faults[0].target
    back = first_after(tmp_path / "out" / "sandbox", "writable", _kill_mono(result),
                       member=member)  # fmt: skip
    assert back is not None
    down_s = back["t_mono"] - _kill_mono(result)  # the delay and the member's start
    # The server's own gap, through rsdrill's wire client that reconnects at once.
    raw = result.metrics.raw_write_unavailable_s
    assert raw is not None and abs(raw - down_s) <= 0.25, (raw, down_s)
    # pymongo's: it re-checks a member it marked Unknown at most every 500 ms
    # (minHeartbeatFrequencyMS), so its writes resume up to that much after the server's.
    gap = result.metrics.write_unavailable_s
    assert gap is not None and raw - 0.05 <= gap <= raw + 0.5 + 0.25, (gap, raw, down_s)
    assert result.metrics.failover_s is None  # the same member came back: no failover


def _run_rs1_kill(tmp_path: Path, delay: float) -> Result:
    """An rs1 member killed at 1 s and restarted `delay` seconds later, which must pass."""
    result = _run(tmp_path, {
        "name": "rs1-kill",
        "target": {"platform": "sandbox", "topology": "rs1"},
        "faults": [{"at": "1s", "kind": "host-kill", "restart": {"after": f"{delay}s"}}],
        "observe": {"after_revert": "10s"},
        "guards": {"allow_quorum_loss": True},
    })  # fmt: skip
    assert result.verdict == "pass", result.error
    return result


def test_a_fault_injected_late_is_held_for_its_whole_restart_delay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A platform whose lookups before the injection are slow (vCenter under load) puts the
    fault in late: the restart still comes `restart.after` after the kill, not at the
    scheduled time (which would cut the outage short by the lateness)."""
    late_s, delay = 1.5, 2.0
    build = runner._injector

    def slow_injector(*args: Any) -> Any:
        time.sleep(late_s)  # the time under test: a platform's lookups before the injection
        return build(*args)

    monkeypatch.setattr(runner, "_injector", slow_injector)
    result = _run_rs1_kill(tmp_path, delay)
    [fault] = result.faults
    assert fault.injected_at_s is not None and fault.reverted_at_s is not None
    assert fault.injected_at_s >= 1 + late_s
    assert delay <= fault.reverted_at_s - fault.injected_at_s <= delay + 0.5, fault
    back = first_after(tmp_path / "out" / "sandbox", "writable", _kill_mono(result),
                       member=fault.target)  # fmt: skip
    assert back is not None and back["t_mono"] - _kill_mono(result) >= delay


def test_a_slow_injection_is_held_from_when_it_took_effect(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An injection that takes a while before its kill lands (a local member's pid found by
    scanning /proc: over 0.1 s on a loaded machine, which once left a 4 s restart delay 40 ms
    short) still leaves the member down for the whole delay: the hold counts from when the
    injection returned, not from when it began."""
    slow_s, delay = 1.0, 2.0
    build = runner._injector
    killed: list[float] = []

    def slow_injector(*args: Any) -> Any:
        injector = build(*args)
        inject = injector.inject

        def slowly() -> None:
            time.sleep(slow_s)  # the time under test: inside the injection, before the kill
            inject()
            killed.append(time.monotonic())

        monkeypatch.setattr(injector, "inject", slowly)
        return injector

    monkeypatch.setattr(runner, "_injector", slow_injector)
    result = _run_rs1_kill(tmp_path, delay)
    [fault] = result.faults
    assert fault.injected_at_s is not None and fault.reverted_at_s is not None
    assert fault.reverted_at_s - fault.injected_at_s >= delay + slow_s, fault
    [kill] = killed
    back = first_after(tmp_path / "out" / "sandbox", "writable", kill, member=fault.target)
    assert back is not None and back["t_mono"] - kill >= delay, (back, kill)


@pytest.mark.parametrize("kind", ["host-freeze", "stepdown"])
def test_freeze_and_stepdown_are_measured(tmp_path: Path, kind: str) -> None:
    fault: dict[str, Any] = {"at": "2s", "kind": kind, "select": "primary"}
    fault["duration"] = "3s" if kind == "host-freeze" else "10s"
    result = _run(tmp_path, {
        "name": f"primary-{kind}",
        "target": {"platform": "sandbox", "topology": "rs3", "election_timeout": "1s"},
        "faults": [fault],
        "observe": {"after_revert": "15s"},
    })  # fmt: skip
    assert result.verdict == "pass", result.error
    assert result.metrics.failover_s is not None
    if kind == "stepdown":
        assert result.metrics.failover_s < 1.0  # a hand-off, not an election timeout
    else:
        assert result.faults[0].reverted_at_s is not None


def test_local_platform_kills_and_restarts_existing_processes(
    tmp_path: Path, existing_set: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Members started outside rsdrill, restarted with their own command (as a mongod would)."""
    monkeypatch.setenv("RSDRILL_ALLOW", "rs0")
    result = _run(tmp_path, {
        "name": "local-primary-kill",
        "target": local_target(existing_set),
        "faults": [{"at": "2s", "kind": "host-kill", "select": "primary", "duration": "3s"}],
        "observe": {"after_revert": "20s"},
        "slo": {"lost_acknowledged_writes": "== 0"},
    })  # fmt: skip
    assert result.verdict == "pass", result.error
    killed = result.faults[0].target
    assert result.metrics.failover_s is not None and result.metrics.failover_s < 5
    assert result.metrics.recovery_s[killed] is not None
    assert listening_pid(int(killed.rsplit(":", 1)[1])) is not None  # restarted by its command


@pytest.mark.parametrize("phase", ["revert", "analyze", "teardown"])
def test_signal_after_the_faults_still_aborts(tmp_path: Path, phase: str) -> None:
    """Ctrl-C once the faults are over (during the final revert, the analysis, the teardown)
    ends the run as aborted too: exit 3 is what the user asked for."""

    def interrupt(name: str) -> None:
        if name == phase:
            os.kill(os.getpid(), signal.SIGINT)

    experiment = Experiment.model_validate({
        "name": "late-signal",
        "target": {"platform": "sandbox", "topology": "rs3", "election_timeout": "1s"},
        "faults": [{"at": "1s", "kind": "stepdown", "duration": "2s",
                    "secondary_catch_up": "1s"}],
        "observe": {"after_revert": "1s"},
    })  # fmt: skip
    result = run_experiment(
        experiment,
        RunOptions(out_dir=tmp_path / "out", live=False, journal_dir=tmp_path, on_phase=interrupt),
    )
    assert (result.verdict, result.exit_code) == ("aborted", 3), result.error
    assert result.error == "aborted by signal"
