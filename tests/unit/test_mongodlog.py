"""A timeline derived from mongod's structured JSON log (the rules in `mongodlog.py`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rsdrill.experiment.loader import load_document
from rsdrill.experiment.mongodlog import (
    MongodLogError,
    derive_timeline,
    parse_log,
    read_log,
    timeline_name,
)
from rsdrill.experiment.schema import Target
from rsdrill.experiment.timeline import Timeline
from tests.harness.cli import rsdrill_run

SAMPLE = Path(__file__).parent.parent / "fixtures" / "mongod-incident.log"
SANDBOX = Target(platform="sandbox", topology="rs3")


def _line(second: float, msg: str, log_id: int = 0, c: str = "REPL", **attr: Any) -> str:
    minute, sec = divmod(second, 60)
    stamp = f"2024-05-14T10:{int(minute):02d}:{sec:06.3f}+00:00"
    entry = {"t": {"$date": stamp}, "s": "I", "c": c, "id": log_id, "ctx": "ReplCoord-0",
             "msg": msg, "attr": attr}  # fmt: skip
    return json.dumps(entry)


def _transition(second: float, old: str, new: str) -> str:
    return _line(second, "Replica set state transition", 21358, newState=new, oldState=old)


def _derive(lines: list[str], member: str | None = "a:1") -> list[tuple[float, str, Any]]:
    timeline = derive_timeline(parse_log(lines, member), "t", SANDBOX)
    return [(e.at, e.kind, e.duration) for e in timeline.events]


def test_the_sample_incident_is_a_primary_loss_then_a_stepdown() -> None:
    events = read_log(SAMPLE)
    assert {e.host for e in events} == {"mongo-a:27017", "mongo-b:27017", "mongo-c:27017"}
    timeline = derive_timeline(events, timeline_name(SAMPLE), SANDBOX)
    assert timeline.name == "incident-mongod-incident"
    assert [(e.at, e.kind, e.select, e.duration) for e in timeline.events] == [
        (0.0, "host-kill", "primary", 4.0),  # election at 51.733, mongo-a SECONDARY at 55.733
        (10.0, "stepdown", "primary", None),  # mongo-b's transition; the command logged after
    ]
    assert "mongo-a:27017 lost as PRIMARY" in timeline.events[0].note
    assert "mongo-b:27017 elected primary" in timeline.events[0].note
    assert "replSetStepDown on mongo-b:27017" in timeline.events[1].note


def test_the_cli_writes_a_timeline_that_loads(tmp_path: Path) -> None:
    out = tmp_path / "incident.yaml"
    proc = rsdrill_run(
        ["timeline", "from-mongod-log", str(SAMPLE),
         "--out", str(out), "--name", "may-incident"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    timeline = load_document(Timeline, out)
    assert timeline.name == "may-incident" and len(timeline.events) == 2
    assert timeline.to_experiment().faults[0].at == 2.0  # t+0 after the lead-in


def test_one_members_own_log_leaving_primary_without_a_command_is_a_kill() -> None:
    lines = [
        _transition(0, "SECONDARY", "PRIMARY"),
        _transition(30, "PRIMARY", "SECONDARY"),  # lost its majority: no command
        _transition(31, "SECONDARY", "PRIMARY"),  # back at its next change
        _transition(45, "PRIMARY", "ROLLBACK"),
        _transition(52.5, "ROLLBACK", "SECONDARY"),
    ]
    assert _derive(lines) == [(0.0, "host-kill", 1.0), (15.0, "host-kill", 7.5)]


def test_a_stepdown_command_before_the_transition_counts_from_the_command() -> None:
    lines = [
        _transition(0, "SECONDARY", "PRIMARY"),
        _line(20, "Received replSetStepDown request"),
        _transition(24, "PRIMARY", "SECONDARY"),
    ]
    assert _derive(lines) == [(0.0, "stepdown", None)]


@pytest.mark.parametrize(
    "msg",
    ["Stepping down from primary in response to heartbeat", "Stepping down from primary, new term"],
)
def test_a_primary_giving_way_on_its_own_is_not_a_stepdown(msg: str) -> None:
    lines = [
        _transition(0, "SECONDARY", "PRIMARY"),
        _line(10, msg),
        _transition(10, "PRIMARY", "SECONDARY"),
    ]
    assert _derive(lines) == [(0.0, "host-kill", None)]  # never seen back: not restarted


def test_a_primary_that_never_comes_back_is_not_restarted() -> None:
    lines = [
        _line(0, "Member is in new state", 21215, hostAndPort="b:1", newState="PRIMARY"),
        _line(12, "Starting an election, since we've seen no PRIMARY in election timeout period",
              4615652, c="ELECTION"),
        _line(12.1, "Election succeeded, assuming primary role", 21450, c="ELECTION", term=3),
    ]  # fmt: skip
    timeline = derive_timeline(parse_log(lines, "a:1"), "t", SANDBOX)
    assert [(e.kind, e.restart) for e in timeline.events] == [("host-kill", False)]
    assert "a:1 started an election while it was primary" in timeline.events[0].note


def test_an_election_after_a_stepdown_is_no_second_fault() -> None:
    lines = [
        _line(0, "Member is in new state", 21215, hostAndPort="b:1", newState="PRIMARY"),
        _line(9, "Member is in new state", 21215, hostAndPort="b:1", newState="SECONDARY"),
        _line(9.5, "Starting an election due to step up request", c="ELECTION"),
    ]
    with pytest.raises(MongodLogError, match="no fault found: 3 replication events"):
        derive_timeline(parse_log(lines, "a:1"), "t", SANDBOX)


def test_times_as_milliseconds_and_lines_that_are_not_json_objects() -> None:
    lines = [
        "",
        "legacy preamble",
        json.dumps(
            {
                "t": {"$date": {"$numberLong": "1715681642000"}},
                "c": "REPL",
                "id": 21358,
                "msg": "Replica set state transition",
                "attr": {"oldState": "PRIMARY", "newState": "SECONDARY"},
            }
        ),
    ]
    (event,) = parse_log(lines, "a:1")
    assert event.t.isoformat() == "2024-05-14T10:14:02+00:00" and event.old == "PRIMARY"


@pytest.mark.parametrize(
    ("line", "problem"),
    [('{"t": {"$date": "2024"}, "oops"}', "log:3: not a JSON log line"),
     ('{"t": {"$date": "soon"}, "id": 21358, "attr": {}}', "log:3: no time")],
)  # fmt: skip
def test_broken_lines_are_located(line: str, problem: str) -> None:
    with pytest.raises(MongodLogError, match=problem):
        parse_log(["", "", line], source="log")


def test_a_line_cut_short_is_skipped_and_one_glued_after_it_read() -> None:
    whole = _transition(5, "PRIMARY", "SECONDARY")
    lines = [_transition(0, "SECONDARY", "PRIMARY")[:50], _transition(1, "A", "B")[:70] + whole]
    assert [(e.line, e.new) for e in parse_log(lines, "a:1")] == [(2, "SECONDARY")]


def test_timeline_names_are_safe() -> None:
    assert timeline_name(Path("/var/log/mongo d@prod.log")) == "incident-mongo-d-prod"
