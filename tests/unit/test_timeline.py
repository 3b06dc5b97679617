"""Timeline files: incident offsets, located errors, the experiment they make, and a replay
rebuilt from a previous run's result; roles from the failover probe's hello answers."""

from __future__ import annotations

from typing import Any

import pytest

from rsdrill.engine.selection import states_from_hellos
from rsdrill.experiment.loader import ExperimentError, load_document_text
from rsdrill.experiment.schema import SelectCount, Target
from rsdrill.experiment.timeline import (
    ReplayError,
    Timeline,
    format_offset,
    parse_offset,
    timeline_from_result,
)
from rsdrill.history import Op
from rsdrill.result import FaultResult, Result, SloResult, TargetInfo

INCIDENT = """\
name: incident-42
target: {platform: sandbox, topology: rs3}
lead_in: 3s
events:
  - at: t+0
    kind: host-kill
    select: primary
    duration: 30s
    note: primary host lost
  - {at: t+40s, kind: host-freeze, select: secondary, duration: 5m}
  - {at: t+1m30s, kind: stepdown}
slo: {write_unavailable_s: "<= 15"}
"""

SANDBOX = Target(platform="sandbox", topology="rs3")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("t+0", 0.0), ("t+40s", 40.0), ("T+1m30s", 90.0), ("t + 250ms", 0.25), ("t+12", 12.0),
     ("40s", 40.0), (7, 7.0), ("t", 0.0)],
)  # fmt: skip
def test_offsets_read_as_an_incident_write_up_puts_them(text: Any, seconds: float) -> None:
    assert parse_offset(text) == seconds


@pytest.mark.parametrize("text", ["t-5s", "t+", "t+soon", "yesterday", -1, True])
def test_what_is_not_an_offset_is_refused(text: Any) -> None:
    with pytest.raises(ValueError):
        parse_offset(text)


def test_format_offset() -> None:
    assert [format_offset(s) for s in (0, 40, 0.25, 90)] == ["t+0", "t+40s", "t+250ms", "t+90s"]


def test_a_timeline_becomes_an_experiment_after_its_lead_in() -> None:
    timeline = load_document_text(Timeline, INCIDENT, "incident.yaml")
    assert timeline.events[0].note == "primary host lost"
    experiment = timeline.to_experiment()
    assert experiment.name == "incident-42"
    assert [(f.at, f.kind, f.select) for f in experiment.faults] == [
        (3.0, "host-kill", "primary"),
        (43.0, "host-freeze", "secondary"),
        (93.0, "stepdown", "primary"),
    ]
    assert experiment.faults[0].revert_after == 30.0 and experiment.faults[1].duration == 300.0
    assert experiment.slo == {"write_unavailable_s": "<= 15"}
    assert experiment.probes.failover is not None  # the default probes


def test_to_yaml_round_trips() -> None:
    timeline = load_document_text(Timeline, INCIDENT, "incident.yaml")
    again = load_document_text(Timeline, timeline.to_yaml(), "again.yaml")
    assert again == timeline
    assert "at: t+1m30s" not in timeline.to_yaml() and "at: t+90s" in timeline.to_yaml()


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (("at: t+0", "at: t+soon"), "incident.yaml:5:9: events[0].at: 't+soon' is not an offset"),
        (("kind: host-kill", "kind: host-kil"),
         "incident.yaml:6:11: events[0].kind: unknown value 'host-kil'; did you mean 'host-kill'?"),
        (("note: primary", "nots: primary"),
         "incident.yaml:9:5: events[0].nots: unknown key; did you mean 'note'?"),
        (("topology: rs3", "topology: rs1"),
         "incident.yaml:10:44: events[1].select: select secondary, but rs1 has no secondary"),
        (("lead_in: 3s", "lead_in: soon"), "incident.yaml:3:10: lead_in: 'soon' is not a duration"),
        (("write_unavailable_s", "write_unavailable"),
         "incident.yaml:12:7: slo.write_unavailable: unknown metric; did you mean"),
        (("events:", "event:"), "incident.yaml:4:1: event: unknown key; did you mean 'events'?"),
    ],
)  # fmt: skip
def test_problems_are_located_like_an_experiments(change: tuple[str, str], expected: str) -> None:
    with pytest.raises(ExperimentError) as info:
        load_document_text(Timeline, INCIDENT.replace(*change), "incident.yaml")
    assert str(info.value).startswith(expected), str(info.value)


def _result(*faults: FaultResult, topology: str = "rs3") -> Result:
    return Result(
        experiment="drill",
        verdict="pass",
        exit_code=0,
        started_at="2026-01-01T00:00:00+00:00",
        duration_s=30.0,
        target=TargetInfo(platform="sandbox", topology=topology, uri="", members=[]),
        faults=list(faults),
    )


def _fault(kind: str, host: str, at: float, until: float | None, **detail: Any) -> FaultResult:
    return FaultResult(kind=kind, target=host, injected_at_s=at, reverted_at_s=until, detail=detail)


def test_a_result_becomes_the_same_fault_sequence_by_role() -> None:
    result = _result(
        _fault("host-freeze", "h:2", 2.0031, 5.0012, role="SECONDARY", index=0),
        _fault("stepdown", "h:1", 3.0102, None, role="PRIMARY", index=1),
        _fault("host-kill", "h:3", 8.0051, 11.0004, role="PRIMARY", index=2),
        _fault("host-kill", "h:1", 15.0, None, role="PRIMARY", index=3),
    )
    timeline = timeline_from_result(result, SANDBOX)
    assert timeline.lead_in == 0 and timeline.name == "drill-replay"
    faults = timeline.to_experiment().faults
    assert [(f.kind, f.select, f.at) for f in faults] == [
        ("host-freeze", "secondary", 2.003),
        ("stepdown", "primary", 3.01),
        ("host-kill", "primary", 8.005),
        ("host-kill", "primary", 15.0),
    ]
    assert [f.revert_after for f in faults] == [2.998, None, 2.995, None]
    assert faults[3].restart is False  # never restarted in the original run


def test_a_fault_is_held_from_when_its_injection_returned() -> None:
    # A kill that took 0.1 s to take the process down was held 3 s from then: its replay holds
    # 3 s too (counted from the injection's start, each replay would add its own kill's wait).
    kill = _fault("host-kill", "h:3", 8.0, 11.1, role="PRIMARY", index=0)
    kill.applied_at_s = 8.1
    (fault,) = timeline_from_result(_result(kill), SANDBOX).to_experiment().faults
    assert fault.revert_after == 3.0


def test_the_faults_options_come_back_with_them() -> None:
    stepdown = {"duration": 30.0, "secondary_catch_up": 5.0, "force": True}
    disk = {"duration": 9.0, "errno": "ENOSPC", "operations": ["fsync"], "path": "journal/*"}
    result = _result(
        _fault("stepdown", "h:1", 3.0, None, role="PRIMARY", index=0, options=stepdown),
        _fault("disk-fault", "h:2", 40.0, 45.0, role="SECONDARY", index=1, options=disk),
    )
    down, fault = timeline_from_result(result, SANDBOX).to_experiment().faults
    assert (down.duration, down.secondary_catch_up, down.force) == (30.0, 5.0, True)
    # The disk fault lasted as long as it really did (5 s), with its own errno and path.
    assert (fault.duration, fault.errno, fault.operations, fault.path) == (
        5.0, "ENOSPC", ("fsync",), "journal/*",
    )  # fmt: skip


def test_the_runs_slos_judge_its_replay() -> None:
    result = _result(_fault("stepdown", "h:1", 3.0, None, role="PRIMARY", index=0))
    result.slo = [
        SloResult(metric="write_unavailable_s", op="<=", threshold=12.7, observed=3.0, passed=True),
        SloResult(metric="recovery_s.max", op="<", threshold=30.0, observed=None, passed=False),
    ]
    experiment = timeline_from_result(result, SANDBOX).to_experiment()
    assert experiment.slo == {"write_unavailable_s": "<= 12.7", "recovery_s.max": "< 30.0"}


def test_members_of_one_count_fault_become_that_count_again() -> None:
    result = _result(
        _fault("host-kill", "h:2", 2.0, 6.0, role="SECONDARY", index=0),
        _fault("host-kill", "h:3", 2.01, 6.0, role="SECONDARY", index=0),
    )
    timeline = timeline_from_result(result, SANDBOX)
    assert len(timeline.events) == 1
    assert timeline.events[0].select == SelectCount(count=2, role="secondary")


@pytest.mark.parametrize(
    ("detail", "problem"),
    [({}, "does not record the member's role"), ({"role": "STARTUP2"}, "was STARTUP2")],
)
def test_a_fault_without_a_role_cannot_be_replayed(detail: dict[str, Any], problem: str) -> None:
    with pytest.raises(ReplayError, match=problem):
        timeline_from_result(_result(_fault("stepdown", "h:1", 3.0, None, **detail)), SANDBOX)


def test_a_result_without_injected_faults_is_refused() -> None:
    with pytest.raises(ReplayError, match="no injected fault"):
        timeline_from_result(_result(_fault("stepdown", "h:1", None, None)), SANDBOX)  # type: ignore[arg-type]


def test_the_replay_target_must_fit_the_roles() -> None:
    result = _result(_fault("host-freeze", "h:2", 2.0, 3.0, role="SECONDARY"))
    with pytest.raises(ValueError, match="rs1 has no secondary"):
        timeline_from_result(result, Target(platform="sandbox", topology="rs1"))


# -- roles from hello answers ---------------------------------------------------------------

MEMBERS = ["h:1", "h:2", "h:3"]


def _hello(member: str, t: float, outcome: str = "ok", **detail: Any) -> Op:
    return Op("failover", "hello", member, t, t + 0.002, outcome, detail)


def _answers(t: float) -> list[Op]:
    return [
        _hello("h:1", t, writable=True, secondary=False),
        _hello("h:2", t, writable=False, secondary=True),
        _hello("h:3", t - 0.25, "timeout", error="timed out"),  # frozen: its hellos time out
    ]


def test_roles_come_from_the_latest_fresh_hello_answers() -> None:
    ops = _answers(4.9) + _answers(5.0)
    states = states_from_hellos(ops, MEMBERS, since_s=3.0, now_s=5.01, max_age_s=0.4)
    assert states == {"h:1": "PRIMARY", "h:2": "SECONDARY", "h:3": "DOWN"}


def test_arbiters_are_recognized() -> None:
    ops = [*_answers(5.0)[:2], _hello("h:3", 5.0, writable=False, secondary=False, arbiter=True)]
    states = states_from_hellos(ops, MEMBERS, since_s=0, now_s=5.01, max_age_s=0.4)
    assert states is not None and states["h:3"] == "ARBITER"


@pytest.mark.parametrize(
    ("ops", "since_s", "now_s"),
    [
        (_answers(5.0), 5.0, 5.01),  # nothing answered since the last change
        (_answers(5.0), 3.0, 6.0),  # too old
        (_answers(5.0)[:2], 3.0, 5.01),  # a member never answered
        ([*_answers(5.0)[:2], _hello("h:3", 5.0, writable=False, secondary=False)], 3.0, 5.01),
    ],
)
def test_without_fresh_answers_for_every_member_the_caller_asks_live(
    ops: list[Op], since_s: float, now_s: float
) -> None:
    assert states_from_hellos(ops, MEMBERS, since_s=since_s, now_s=now_s, max_age_s=0.4) is None


def test_awaited_answers_and_failures_tell_the_state_as_of_their_end() -> None:
    """A member's awaited hello is answered at once on a change, so one that began before the
    last fault and ended after it is current; so is a failure that ended after it (a frozen
    member's awaited hello fails only after max_await + timeout). A polled answer is not."""
    awaited = [
        Op("failover", "hello", "h:1", 4.6, 5.1, "ok", {"writable": True, "awaited": True}),
        Op("failover", "hello", "h:2", 4.7, 5.2, "ok", {"secondary": True, "awaited": True}),
        Op("failover", "hello", "h:3", 4.4, 5.15, "timeout", {"awaited": True}),
    ]
    states = states_from_hellos(awaited, MEMBERS, since_s=5.0, now_s=5.25, max_age_s=0.4)
    assert states == {"h:1": "PRIMARY", "h:2": "SECONDARY", "h:3": "DOWN"}
    polled = [*awaited[:2], _hello("h:3", 4.99, writable=False, secondary=True)]
    assert states_from_hellos(polled, MEMBERS, since_s=5.0, now_s=5.25, max_age_s=0.4) is None
