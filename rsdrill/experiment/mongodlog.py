"""An incident timeline derived from mongod's structured JSON log (MongoDB 4.4 and later).

Each log line is one JSON object: `{"t": {"$date": ...}, "s": "I", "c": "REPL", "id": 21358,
"ctx": ..., "msg": "Replica set state transition", "attr": {"newState": ..., "oldState": ...}}`.
Lines that are not JSON objects (blank lines, a legacy preamble) are skipped.

Which member a line is about: its `host` field when the log was collected with one (log
shippers add it, so several members' logs can be merged into one file), otherwise the member
named on the command line (`--member`), since a mongod's own log never names its host.

What is read:

- state transitions (id 21358, "Replica set state transition": `oldState` → `newState`);
- other members' states as a member sees them (id 21215, "Member is in new state":
  `hostAndPort`, `newState`), so that one survivor's log tells when the others came back;
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
   an election timeout earlier.
4. A killed primary restarts when that member is next SECONDARY (or PRIMARY) again, by its own
   log or another member's view, after the change that lost it (a primary that fell straight
   to SECONDARY is back at its next change): the kill's `duration`. One never seen again is
   `restart: false`.
5. Everything else (elections won, members starting up) goes into the faults' notes.

The first fault is t+0; the others are offsets from it.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from rsdrill.errors import RsdrillError
from rsdrill.experiment.schema import Target
from rsdrill.experiment.timeline import Timeline

STEPDOWN_BEFORE_S = 15.0  # a stepdown command waits up to secondaryCatchUpPeriodSecs (10 s)
STEPDOWN_AFTER_S = 2.0

_STATE_TRANSITION = 21358
_MEMBER_NEW_STATE = 21215
_ELECTION_WON = (21450, 21331)
_INVOLUNTARY_STEPDOWN = ("in response to heartbeat", "new term")

Kind = Literal["transition", "seen", "election", "elected", "stepdown"]


class MongodLogError(RsdrillError, ValueError):
    """A log that cannot be read or yields no fault: `str()` is `FILE:LINE: problem`."""


@dataclass(frozen=True)
class LogEvent:
    """One replication event read from the log."""

    t: dt.datetime
    host: str
    kind: Kind
    line: int
    old: str | None = None
    new: str | None = None


def read_log(path: Path, member: str | None = None) -> list[LogEvent]:
    """The replication events in the log file at `path`, in time order."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise MongodLogError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return parse_log(text.splitlines(), member, source=str(path))


def parse_log(
    lines: Iterable[str], member: str | None = None, source: str = "<log>"
) -> list[LogEvent]:
    """The replication events in `lines`, in time order (a stable sort: merged logs interleave)."""
    events = []
    for number, raw in enumerate(lines, 1):
        text = raw.strip()
        if not text.startswith("{"):
            continue
        try:
            entry = json.loads(text)
        except json.JSONDecodeError as exc:
            raise MongodLogError(f"{source}:{number}: not a JSON log line: {exc.msg}") from None
        event = _event(entry, member, number, source)
        if event is not None:
            events.append(event)
    return sorted(events, key=lambda e: e.t)


def _event(entry: Any, member: str | None, line: int, source: str) -> LogEvent | None:
    if not isinstance(entry, dict):
        return None
    msg = str(entry.get("msg", ""))
    attr = entry.get("attr")
    if not isinstance(attr, dict):
        attr = {}
    log_id = entry.get("id")
    kind: Kind | None = None
    host = str(entry.get("host") or member or "this member")
    old = new = None
    if log_id == _STATE_TRANSITION or msg == "Replica set state transition":
        kind, old, new = "transition", attr.get("oldState"), attr.get("newState")
    elif log_id == _MEMBER_NEW_STATE or msg == "Member is in new state":
        kind, new = "seen", attr.get("newState")
        host = str(attr.get("hostAndPort", host))
    elif msg.startswith("Starting an election"):
        kind = "election"
    elif log_id in _ELECTION_WON or msg.startswith(("Election succeeded", "Transition to primary")):
        kind = "elected"
    elif _is_stepdown(msg, attr):
        kind = "stepdown"
    if kind is None:
        return None
    return LogEvent(_time(entry, line, source), host, kind, line, old, new)


def _is_stepdown(msg: str, attr: dict[str, Any]) -> bool:
    command = attr.get("command")
    if isinstance(command, dict) and "replSetStepDown" in command:
        return True
    if "replsetstepdown" in msg.lower():
        return True
    return msg.startswith("Stepping down from primary") and not any(
        words in msg for words in _INVOLUNTARY_STEPDOWN
    )


def _time(entry: dict[str, Any], line: int, source: str) -> dt.datetime:
    stamp = entry.get("t")
    value = stamp.get("$date") if isinstance(stamp, dict) else stamp
    if isinstance(value, dict):  # canonical extended JSON: {"$numberLong": "<ms>"}
        value = value.get("$numberLong")
    try:
        if isinstance(value, int | float) or (isinstance(value, str) and value.isdigit()):
            return dt.datetime.fromtimestamp(int(value) / 1000, dt.UTC)
        when = dt.datetime.fromisoformat(str(value))
    except (TypeError, ValueError):
        raise MongodLogError(f"{source}:{line}: no time ({{'t': {{'$date': ...}}}})") from None
    return when if when.tzinfo else when.replace(tzinfo=dt.UTC)


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
            elif e.host in down and e.new in ("SECONDARY", "PRIMARY"):
                fault = down.pop(e.host)
                fault.until = e.t
                fault.notes.append(f"{e.host} SECONDARY again")
            states[e.host] = e.new
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
    if not faults:
        raise MongodLogError(
            f"no fault found: {len(events)} replication events, but no primary was lost "
            "or stepped down"
        )
    return Timeline.model_validate(
        {
            "name": name,
            "target": target,
            "description": "derived from mongod logs",
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
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", path.stem).strip("-.") or "mongod"
    return f"incident-{stem}"
