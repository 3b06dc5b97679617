"""An incident timeline derived from mongod's structured JSON log (MongoDB 4.4 and later).

`mongodlog_read.py` reads the files (which member each line is about, compressed and rotated
logs) and `mongodlog_clocks.py` puts the members' logs on one clock. The events:

- state transitions (id 21358): a member's own;
- other members' states as a member sees them (id 21215 "Member is in new state", and id
  21216, a member seen going down), so that one survivor's log tells when the others went
  and came back;
- elections started ("Starting an election ...", e.g. id 4615652) and won ("Election
  succeeded", id 21450; "Transition to primary complete", id 21331): they set who is primary;
- explicit stepdowns: a line whose `attr.command` is a `replSetStepDown`, a message naming
  replSetStepDown, or "Stepping down from primary" — except "... in response to heartbeat" and
  "..., new term", which are a primary giving way on its own, not an operator's command.

How they become faults (every fault selects by role, `select: primary`, as the replay's set has
other hosts):

1. A member leaving PRIMARY with an explicit stepdown on it from `STEPDOWN_BEFORE_S` before to
   `STEPDOWN_AFTER_S` after (a command is logged when it finishes, after the transition) is a
   `stepdown`.
2. A member leaving PRIMARY without one is a `host-kill` of the primary: re-enacted as losing
   the primary's host, the closest fault rsdrill has (a primary that lost its majority, or
   whose host died, stops taking writes the same way).
3. An election started while another member is PRIMARY, and that primary has not stepped
   down, means the primary stopped answering (its own log usually ends there): a `host-kill`
   of the primary at the election's start — the log does not say when the host died; at most
   an election timeout earlier. So is the primary seen going down (id 21216, or a seen state
   of DOWN) by another member, whichever comes first: a member that was never primary tells it.
4. A killed primary restarts when that member is next SECONDARY (or PRIMARY) again, by its own
   log or another member's view, after the change that lost it (a primary that fell straight
   to SECONDARY is back at its next change): the kill's `duration`. One never seen again is
   `restart: false`.
5. A primary whose own log shows it starting again (id 4615611, "MongoDB starting") with no
   loss found before was lost when its log stopped: a `host-kill` from the line before.
6. Everything else (elections won, members starting up) goes into the faults' notes.

The first fault is t+0; the others are offsets from it.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rsdrill.experiment.mongodlog_clocks import on_one_clock
from rsdrill.experiment.mongodlog_read import (
    LogEvent,
    MongodLogError,
    parse_log,
    read_log,
    read_logs,
)
from rsdrill.experiment.schema import Target
from rsdrill.experiment.timeline import Timeline

__all__ = ["LogEvent", "MongodLogError", "derive_timeline", "parse_log", "read_incident",
           "read_log", "timeline_name"]  # fmt: skip

STEPDOWN_BEFORE_S = 15.0  # a stepdown command waits up to secondaryCatchUpPeriodSecs (10 s)
STEPDOWN_AFTER_S = 2.0
_GONE = ("DOWN", "(not reachable/healthy)")  # as another member sees it


def read_incident(paths: list[Path], member: str | None = None) -> tuple[list[LogEvent], str]:
    """Every file's events on one clock, in time order, and what was done to the clocks."""
    events, offsets = on_one_clock(read_logs(paths, member))
    moved = ", ".join(f"{o} {-s:+g} s" for o, s in offsets.items())
    return events, f"; clocks moved to agree: {moved}" if moved else ""


@dataclass
class _Fault:
    """A fault being derived: its event fields, and who it was (to find its end)."""

    t: dt.datetime
    kind: str
    host: str
    notes: list[str] = field(default_factory=list)
    until: dt.datetime | None = None


def derive_timeline(
    events: list[LogEvent],
    name: str,
    target: Target,
    description: str = "derived from mongod logs",
) -> Timeline:
    """The incident's faults (see the module's rules) as a timeline against `target`."""
    stepdowns: dict[str, list[dt.datetime]] = {}
    for e in events:
        if e.kind == "stepdown":
            stepdowns.setdefault(e.host, []).append(e.t)
    states: dict[str, str] = {}
    faults: list[_Fault] = []
    down: dict[str, _Fault] = {}  # killed primaries not back yet, by host

    def stepped_down(host: str, t: dt.datetime) -> dt.datetime | None:
        for s in stepdowns.get(host, []):
            if -STEPDOWN_BEFORE_S <= (s - t).total_seconds() <= STEPDOWN_AFTER_S:
                return s
        return None

    def lose_primary(host: str, t: dt.datetime, why: str) -> None:
        fault = _Fault(t, "host-kill", host, [f"{host} lost as PRIMARY: {why}"])
        faults.append(fault)
        down[host] = fault
        states[host] = "DOWN"  # not the primary an election is held against any more

    for e in events:
        if e.kind in ("transition", "seen") and e.new:
            leaving_primary = e.kind == "transition" and e.old == "PRIMARY" and e.new != "PRIMARY"
            if leaving_primary and e.host not in down:
                command = stepped_down(e.host, e.t)
                if command is not None:
                    faults.append(_Fault(min(command, e.t), "stepdown", e.host,
                                         [f"replSetStepDown on {e.host} (PRIMARY)"]))  # fmt: skip
                else:
                    lose_primary(e.host, e.t, f"it became {e.new} without a stepdown command")
            elif e.kind == "seen" and e.new in _GONE and states.get(e.host) == "PRIMARY":
                if stepped_down(e.host, e.t) is None:
                    lose_primary(e.host, e.t, f"{e.observer} saw it go down")
            elif e.host in down and e.new in ("SECONDARY", "PRIMARY"):
                fault = down.pop(e.host)
                fault.until = e.t
                fault.notes.append(f"{e.host} SECONDARY again")
            states[e.host] = e.new
        elif e.kind == "restart" and states.get(e.host) == "PRIMARY" and e.host not in down:
            # Nothing else showed it lost: its own log stops, then it starts again.
            since = e.last_alive or e.t
            stop = f"{since.astimezone(dt.UTC):%H:%M:%S} UTC"
            lose_primary(e.host, since, f"its log stops at {stop} and it starts again")
            states[e.host] = "STARTUP"
        elif e.kind == "election":
            primary = next((h for h, s in states.items() if s == "PRIMARY" and h != e.host), None)
            if primary and primary not in down and stepped_down(primary, e.t) is None:
                lose_primary(primary, e.t, f"{e.host} started an election while it was primary")
            elif faults:
                faults[-1].notes.append(f"{e.host} called an election")
        elif e.kind == "elected":
            if states.get(e.host) != "PRIMARY" and faults:
                faults[-1].notes.append(f"{e.host} elected primary")
            states[e.host] = "PRIMARY"
    faults.sort(key=lambda f: f.t)  # a restart's loss began before what came ahead of it
    if not faults:
        files = ", ".join(dict.fromkeys(e.source for e in events if e.source)) or "the logs"
        raise MongodLogError(
            f"{files}: no fault found: {len(events)} replication events, but no primary was "
            "lost or stepped down"
        )
    return Timeline.model_validate(
        {
            "name": name,
            "target": target,
            "description": description,
            "events": [_timeline_event(f, faults[0].t) for f in faults],
        }
    )


def _timeline_event(fault: _Fault, t0: dt.datetime) -> dict[str, Any]:
    event: dict[str, Any] = {
        "at": round((fault.t - t0).total_seconds(), 3),
        "kind": fault.kind,
        "select": "primary",
        "note": "; ".join(dict.fromkeys(fault.notes)),  # each note once, in order
    }
    if fault.kind == "host-kill":
        if fault.until is None:
            event["restart"] = False  # never seen back in the log
        else:
            event["duration"] = round((fault.until - fault.t).total_seconds(), 3)
    return event


def timeline_name(path: Path) -> str:
    """A timeline name from the log file's name (letters, digits, _ . - only)."""
    base = path.name.split(".log")[0] if ".log" in path.name else path.stem  # rotated, gzipped
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", base).strip("-.") or "mongod"
    return f"incident-{stem}"
