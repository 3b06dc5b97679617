"""Blast-radius guards, in MongoDB's own terms, checked before anything is broken.

The runner checks them after the target is set up and found healthy (the preflight), before
the probes write anything and before any fault is injected. A guard that refuses raises
`GuardRefusal`: the run injects nothing and ends with verdict aborted (exit 3), the guard's
message as its error.

- allowlist: a sandbox built by the run is always allowed. Any other target is named by its
  replica set name (`set` in the primary's replSetGetStatus). When `RSDRILL_ALLOW` is set
  (comma-separated names; set but empty allows none), the name must be listed. When it is not
  set, the user confirms on the terminal, or passes `--yes`; with no terminal and no `--yes`
  the run is refused. `--yes` never overrides a set `RSDRILL_ALLOW`.
- quorum: from the schedule, the most members down at the same time (host-kill from the kill
  to the restart, or to the end of the run with `restart: false`; host-freeze, volume-detach,
  a disk-fault failing writes or fsyncs (a member fails on those) and a network-partition
  from the members for their duration; `count: N` is N members; stepdown, iops-throttle, a
  read-only or latency-only disk-fault and a partition from clients alone take no member
  down). Faults naming the same
  `member:` count it once; role selections count as distinct members (they are resolved among
  the members still up). If the voting members left (from the primary's replSetGetConfig) are
  fewer than a majority of the voting members, no primary can be elected: refused unless
  `guards.allow_quorum_loss`.
- oplog window: a member kept down longer than the primary's oplog window falls off the oplog
  and needs a full initial sync. The window is what `db.getReplicationInfo()` reports: the
  time between the first and last entries of `local.oplog.rs` (by `$natural`; their `wall`
  dates, else their `ts` seconds), with the oplog's `size` and `maxSize` from collStats. It
  bounds an outage only once the oplog is full (`size` at least 80 % of `maxSize`: WiredTiger
  truncates it in chunks, so a full oplog sits somewhat under its cap); before that nothing
  was ever dropped from it and the check is not made, nor is it when the oplog cannot be read
  (with a warning). Each fault that takes a member down (above), but a host-kill that
  restarts on a wiped volume, must keep its member down for less than the window
  (`restart: false` never brings it back: longer than any window; `volume: wipe` resyncs
  anyway; an arbiter has no oplog). Refused
  unless `guards.allow_oplog_overrun`.
- member health and lag: every member reports itself PRIMARY, SECONDARY or ARBITER, with one
  primary (the preflight waits up to 60 s for that, for a set that is still starting or
  catching up); then, in the primary's replSetGetStatus, every member has health 1 and one of
  those states, and each secondary's lag (the primary's lastAppliedWallTime minus the
  secondary's) is at most `guards.max_lag_before_start` (default 10 s). replSetGetStatus is
  built from heartbeats, so this is checked again for two heartbeat intervals plus a second
  before the run is refused.
"""

from __future__ import annotations

import datetime as dt
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rsdrill import registry
from rsdrill.connection import COMMAND_NOT_FOUND, ConnectOptions, DirectConnection, WireClientError
from rsdrill.deployment import config_placements
from rsdrill.domains import Placement, PlatformPlace, domains_held, placed_by_platform
from rsdrill.engine.selection import current_states
from rsdrill.errors import GuardRefusal
from rsdrill.experiment.schema import (
    Experiment,
    Fault,
    SelectCount,
    SelectDomain,
    SelectMember,
    describe_selection,
)
from rsdrill.states import HEALTHY, PRIMARY_LIKE, STANDALONE

ALLOW_ENV = "RSDRILL_ALLOW"
OPLOG_FULL_FRACTION = 0.8
COMMAND_TIMEOUT_S = 5.0
POLL_S = 0.25


# -- quorum --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DownSpan:
    """A fault that takes members down from `start_s` until `end_s` (inf: never back)."""

    index: int
    start_s: float
    end_s: float
    members: int
    host: str | None
    """The member named by a `member:` selection (the same member counts once)."""


def down_spans(faults: Sequence[Fault], placed: Sequence[Placement] = ()) -> list[DownSpan]:
    """The faults that take members down, and when (in seconds from the probes' start);
    `placed`: the members' placements, for a selection by domain (its voting members count)."""
    spans = []
    for i, fault in enumerate(faults):
        if not fault.takes_member_down():
            continue
        back = fault.revert_after
        end = math.inf if back is None else fault.at + back
        sel = fault.select
        members = sel.count if isinstance(sel, SelectCount) else 1
        if isinstance(sel, SelectDomain):
            try:  # a zone named by what its loss costs: the worst case, the primary unknown
                domain = sel.among(placed)
            except ValueError:  # no zone fits: check_domains refuses it
                domain = None
            members = sum(1 for p in placed if p.votes and domain and domain.matches(p))
        host = sel.member if isinstance(sel, SelectMember) else None
        spans.append(DownSpan(i, fault.at, end, members, host))
    return spans


@dataclass(frozen=True)
class Overlap:
    """The most members down at the same time, from when, and by which faults."""

    members: int
    at_s: float | None
    faults: tuple[int, ...]


def max_concurrent_down(faults: Sequence[Fault], placed: Sequence[Placement] = ()) -> Overlap:
    """The largest number of members the schedule has down at once (the earliest such moment).

    A fault is in force from its injection (inclusive) to its revert (exclusive): at the same
    instant a revert goes first, as in the runner's schedule.
    """
    spans = down_spans(faults, placed)
    best = Overlap(0, None, ())
    for t in sorted({s.start_s for s in spans}):
        members, active = _down_at(spans, t)
        if members > best.members:
            best = Overlap(members, t, tuple(s.index for s in active))
    return best


def _down_at(spans: Sequence[DownSpan], t: float) -> tuple[int, list[DownSpan]]:
    """How many members the spans have down at `t` (a named member once), and those spans."""
    active = [s for s in spans if s.start_s <= t < s.end_s]
    named = {s.host for s in active if s.host is not None}
    return sum(s.members for s in active if s.host is None) + len(named), active


def majority_lost_at(faults: Sequence[Fault], voting: int,
                     placed: Sequence[Placement] = ()) -> float | None:  # fmt: skip
    """The first moment the schedule leaves fewer than a majority of `voting` members up (None:
    never), counted as `max_concurrent_down` counts."""
    spans = down_spans(faults, placed)
    for t in sorted({s.start_s for s in spans}):
        if voting - min(_down_at(spans, t)[0], voting) < majority(voting):
            return t
    return None


def check_domains(faults: Sequence[Fault], placed: Sequence[Placement]) -> None:
    """Refuse a selection by a domain no member's tags place a member in."""
    for i, fault in enumerate(faults):
        sel = fault.select
        if not isinstance(sel, SelectDomain):
            continue
        try:
            domain = sel.among(placed)
        except ValueError as exc:
            raise GuardRefusal("selection", f"faults[{i}].select.domains: {exc}") from None
        if not any(domain.matches(p) for p in placed):
            raise GuardRefusal("selection", f"faults[{i}].select.{sel.key}: no member is in "
                               f"{sel} ({domains_held(placed, sel.key)})")  # fmt: skip


def majority(voting: int) -> int:
    """Votes needed to elect a primary."""
    return voting // 2 + 1


def check_quorum(faults: Sequence[Fault], voting: int, *, allowed: bool,
                 placed: Sequence[Placement] = ()) -> str:  # fmt: skip
    """Refuse a schedule that leaves fewer than a majority of the voting members up.

    Returns what was found (for the run's log) when the run may go ahead.
    """
    worst = max_concurrent_down(faults, placed)
    needed = majority(voting)
    left = voting - min(worst.members, voting)
    summary = (
        f"at most {worst.members} member{'' if worst.members == 1 else 's'} down at once, "
        f"{voting} voting, majority {needed}"
    )
    if left >= needed:
        return f"ok ({summary})"
    at = _secs(worst.at_s or 0.0)
    if allowed:
        return f"quorum loss allowed by guards.allow_quorum_loss ({summary}, from {at})"
    names = [f"faults[{i}]" for i in worst.faults]
    which = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
    members = f"{worst.members} member{'' if worst.members == 1 else 's'}"
    # A zone cut off keeps its members (and, holding the majority, its primary) among
    # themselves: out of every client's reach rather than down.
    cut = all(faults[i].out_of_reach() for i in worst.faults)
    taken = (f"cut{'s' if len(names) == 1 else ''} {members} off at once, leaving {left} of the "
             f"{voting} voting members reachable: fewer than the majority of {needed} a "
             "primary needs, so no client can write" if cut else
             f"take{'s' if len(names) == 1 else ''} {members} down at once, leaving {left} of "
             f"the {voting} voting members up: fewer than the majority of {needed} needed to "
             "elect a primary")  # fmt: skip
    raise GuardRefusal(
        "quorum",
        f"from {at}, {which} {taken}. Set `guards: {{allow_quorum_loss: true}}` to run it anyway",
    )


# -- oplog window --------------------------------------------------------------------------------


@dataclass(frozen=True)
class OplogWindow:
    """The primary's oplog: the time its entries span, its size and its cap (bytes)."""

    span_s: float
    size_bytes: int
    max_bytes: int

    @property
    def full(self) -> bool:
        """True once entries are being dropped: only then does the span bound an outage."""
        return self.max_bytes > 0 and self.size_bytes >= OPLOG_FULL_FRACTION * self.max_bytes

    def describe(self) -> str:
        used = self.size_bytes / self.max_bytes if self.max_bytes else 0.0
        return f"{used:.0%} of {self.max_bytes / 2**20:.1f} MB used"


def planned_outages(faults: Sequence[Fault]) -> list[tuple[int, float]]:
    """(fault index, seconds a member stays down) for each fault whose member must catch up
    from the oplog afterwards: every fault that takes a member down (inf when it never comes
    back) but one whose member comes back on rebuilt data (its kind's `rebuilds_data`: a
    host-kill restarting on an empty volume resyncs anyway); an arbiter has no oplog."""
    outages = []
    for i, fault in enumerate(faults):
        if not fault.takes_member_down() or fault.select == "arbiter":
            continue
        if fault.rebuilds_data():
            continue  # a full initial sync or a restore, not the oplog, brings it back
        back = fault.revert_after
        outages.append((i, math.inf if back is None else back))
    return outages


def check_oplog_window(
    faults: Sequence[Fault], window: OplogWindow | None, *, allowed: bool, unknown: str = ""
) -> str:
    """Refuse an outage at least as long as a full oplog's window.

    `window` None means it could not be read (`unknown` says why): the check is skipped with
    a warning. Returns what was found (for the run's log) when the run may go ahead.
    """
    outages = planned_outages(faults)
    if not outages:
        return "ok (no fault keeps a member down)"
    if window is None:
        return f"WARNING, not checked: the oplog window cannot be known ({unknown})"
    if not window.full:
        return (
            f"not checked: the primary's oplog is not full yet ({window.describe()}): nothing "
            "was dropped from it, so its window is not bounded yet"
        )
    index, longest = max(outages, key=lambda o: o[1])
    if longest < window.span_s:
        return f"ok (longest outage {_secs(longest)} < window {_secs(window.span_s)})"
    if allowed:
        return "oplog overrun allowed by guards.allow_oplog_overrun"
    fault = faults[index]
    kept = "for good (restart: false)" if math.isinf(longest) else f"for {_secs(longest)}"
    raise GuardRefusal(
        "oplog window",
        f"faults[{index}] ({fault.kind}) keeps a member down {kept}, not less than the "
        f"primary's oplog window of {_secs(window.span_s)} ({window.describe()}): the member "
        "would fall off the oplog and need a full initial sync. Set "
        "`guards: {allow_oplog_overrun: true}` to run it anyway",
    )


def oplog_window(conn: DirectConnection) -> tuple[OplogWindow | None, str]:
    """Read the oplog window as `db.getReplicationInfo()` does; (None, why) when it cannot."""
    try:
        stats = conn.command("local", {"collStats": "oplog.rs"})
        edges = [conn.command("local", _oplog_edge(order)) for order in (1, -1)]
    except WireClientError as exc:
        return None, str(exc)
    for reply in (stats, *edges):
        if not reply.get("ok"):
            return None, str(reply.get("errmsg") or reply)
    size, cap = stats.get("size"), stats.get("maxSize")
    if not isinstance(size, int | float) or not isinstance(cap, int | float):
        return None, "collStats on local.oplog.rs gave no size and maxSize"
    first, last = (reply.get("cursor", {}).get("firstBatch") or [None] for reply in edges)
    if first[0] is None or last[0] is None:
        return None, "the oplog is empty"
    span = _entry_time(last[0]) - _entry_time(first[0])
    return OplogWindow(max(span, 0.0), int(size), int(cap)), ""


def _oplog_edge(order: int) -> dict[str, Any]:
    """The oldest (1) or newest (-1) oplog entry's times."""
    return {
        "find": "oplog.rs",
        "filter": {},
        "sort": {"$natural": order},
        "limit": 1,
        "singleBatch": True,
        "projection": {"ts": 1, "wall": 1},
    }


def _entry_time(entry: dict[str, Any]) -> float:
    """An oplog entry's time in seconds: its `wall` date (milliseconds) or its `ts` seconds."""
    wall = entry.get("wall")
    if isinstance(wall, dt.datetime):
        return wall.replace(tzinfo=wall.tzinfo or dt.UTC).timestamp()
    return float(entry["ts"].time)


# -- member health and lag -----------------------------------------------------------------------


def member_problems(status: Mapping[str, Any], max_lag_s: float) -> list[str]:
    """What keeps the set from being ready, from the primary's replSetGetStatus (empty: ready)."""
    members = status.get("members") or []
    me: Mapping[str, Any] = next((m for m in members if m.get("self")), {})
    primary_wall = me.get("lastAppliedWallTime")
    problems = []
    for m in members:
        name, state = m.get("name", "?"), m.get("stateStr", "UNKNOWN")
        if not m.get("health"):
            problems.append(f"{name} is unreachable from the primary (health 0, {state})")
        elif state not in HEALTHY:
            problems.append(f"{name} is {state}")
        elif state == "SECONDARY":
            lag = secondary_lag_s(primary_wall, m.get("lastAppliedWallTime"))
            if lag is None:
                problems.append(f"{name}: the primary does not report its lastAppliedWallTime")
            elif lag > max_lag_s:
                problems.append(
                    f"{name} lags {lag:.1f}s behind the primary "
                    f"(guards.max_lag_before_start: {_secs(max_lag_s)})"
                )
    return problems


def secondary_lag_s(primary_wall: Any, secondary_wall: Any) -> float | None:
    """The primary's lastAppliedWallTime minus a secondary's, in seconds (never negative)."""
    if not isinstance(primary_wall, dt.datetime) or not isinstance(secondary_wall, dt.datetime):
        return None
    return max((primary_wall - secondary_wall).total_seconds(), 0.0)


def max_lag(status: Mapping[str, Any]) -> float:
    """The largest secondary lag in a replSetGetStatus (0 without secondaries)."""
    members = status.get("members") or []
    me: Mapping[str, Any] = next((m for m in members if m.get("self")), {})
    lags = [
        secondary_lag_s(me.get("lastAppliedWallTime"), m.get("lastAppliedWallTime"))
        for m in members
        if m.get("stateStr") == "SECONDARY"
    ]
    return max((lag for lag in lags if lag is not None), default=0.0)


# -- allowlist -----------------------------------------------------------------------------------


def check_allowlist(
    set_name: str,
    allow: str | None,
    *,
    assume_yes: bool,
    confirm: Callable[[str], bool] | None,
    question: str,
) -> str:
    """Refuse a replica set that is not allowed (see the module's docstring).

    `allow` is RSDRILL_ALLOW's value (None: not set); `confirm` asks the user `question` on a
    terminal (None: there is none). Returns how the set was allowed.
    """
    if allow is not None:
        names = [n.strip() for n in allow.split(",") if n.strip()]
        if set_name in names:
            return f"ok ({set_name!r} is in {ALLOW_ENV})"
        raise GuardRefusal(
            "allowlist",
            f"replica set {set_name!r} is not in {ALLOW_ENV} ({', '.join(names) or 'empty'}); "
            f"add it there to run experiments against it",
        )
    if assume_yes:
        return "ok (--yes)"
    if confirm is None:
        raise GuardRefusal(
            "allowlist",
            f"replica set {set_name!r} is not a sandbox of this run and there is no terminal "
            f"to confirm on: list it in {ALLOW_ENV} (e.g. {ALLOW_ENV}={set_name}) or pass --yes",
        )
    if not confirm(question):
        raise GuardRefusal("allowlist", f"not confirmed: replica set {set_name!r} left alone")
    return "ok (confirmed)"


# -- all of them, against the live set -----------------------------------------------------------


def check_guards(
    exp: Experiment,
    members: list[str],
    *,
    options: ConnectOptions,
    env: Mapping[str, str],
    assume_yes: bool,
    confirm: Callable[[str], bool] | None,
    note: Callable[[str], None],
    sleep: Callable[[float], None],
    places: Mapping[str, PlatformPlace] | None = None,
) -> None:
    """Check every guard against the live replica set; GuardRefusal on the first refusal.

    `options`: how to reach the members; `note` receives one line per guard; `sleep` waits
    (and may raise to stop the run); `places`: where the platform knows each member to be,
    over its tags.
    """
    states = current_states(members, timeout_s=1.0, options=options)
    primary = next((h for h, s in states.items() if s in PRIMARY_LIKE), None)
    if primary is None:
        raise GuardRefusal("member health", f"no member is PRIMARY ({_describe(states)})")
    if states[primary] == STANDALONE:
        _check_standalone(exp, primary, env=env, assume_yes=assume_yes, confirm=confirm,
                          note=note)  # fmt: skip
        return
    conn = DirectConnection(primary, COMMAND_TIMEOUT_S, options)
    try:
        status = _command(conn, {"replSetGetStatus": 1}, missing_ok=True)
        if status.get("code") == COMMAND_NOT_FOUND:
            _check_from_hello(exp, conn, states, env=env, assume_yes=assume_yes,
                              confirm=confirm, note=note)  # fmt: skip
            return
        set_name = str(status.get("set", "?"))
        _allow(exp, set_name, f"replica set {set_name!r} ({', '.join(members)})", env=env,
               assume_yes=assume_yes, confirm=confirm, note=note)  # fmt: skip
        config = _command(conn, {"replSetGetConfig": 1}).get("config", {})
        voting = sum(1 for m in config.get("members", []) if m.get("votes", 1))
        if not voting:
            raise GuardRefusal("quorum", "replSetGetConfig on the primary lists no voting member")
        placed = placed_by_platform(config_placements(config), places or {})
        check_domains(exp.faults, placed)
        quorum = check_quorum(exp.faults, voting, allowed=exp.guards.allow_quorum_loss,
                              placed=placed)  # fmt: skip
        note(f"guard quorum: {quorum}")
        window, unknown = oplog_window(conn)
        oplog = check_oplog_window(exp.faults, window, allowed=exp.guards.allow_oplog_overrun,
                                   unknown=unknown)  # fmt: skip
        note(f"guard oplog window: {oplog}")
        heartbeat_s = float(status.get("heartbeatIntervalMillis", 2000)) / 1000
        deadline = time.monotonic() + 2 * heartbeat_s + 1.0
        while problems := member_problems(status, exp.guards.max_lag_before_start):
            if time.monotonic() >= deadline:
                raise GuardRefusal("member health", "; ".join(problems))
            sleep(POLL_S)
            status = _command(conn, {"replSetGetStatus": 1})
        note(f"guard member health: ok (all healthy, max lag {max_lag(status):.1f}s)")
    finally:
        conn.close()


def _allow(
    exp: Experiment,
    name: str,
    what: str,
    *,
    env: Mapping[str, str],
    assume_yes: bool,
    confirm: Callable[[str], bool] | None,
    note: Callable[[str], None],
) -> None:
    if registry.member_source(exp.target.platform) == "built":
        note(f"guard allowlist: ok (a {exp.target.platform} built by this run)")
        return
    question = f"Run experiment {exp.name!r} against {what}: {_fault_summary(exp.faults)}?"
    allowed = check_allowlist(name, env.get(ALLOW_ENV), assume_yes=assume_yes, confirm=confirm,
                              question=question)  # fmt: skip
    note(f"guard allowlist: {allowed}")


def _check_standalone(
    exp: Experiment,
    host: str,
    *,
    env: Mapping[str, str],
    assume_yes: bool,
    confirm: Callable[[str], bool] | None,
    note: Callable[[str], None],
) -> None:
    """A standalone server: named by its address in the allowlist; it is its own quorum of
    one (a fault that takes it down takes the service down: `allow_quorum_loss`, as for rs1);
    it has no oplog and no replication lag."""
    _allow(exp, host, f"standalone server {host}", env=env, assume_yes=assume_yes,
           confirm=confirm, note=note)  # fmt: skip
    note(f"guard quorum: {check_quorum(exp.faults, 1, allowed=exp.guards.allow_quorum_loss)}")
    note("guard oplog window: not applicable (a standalone server has no oplog)")
    note("guard member health: ok (the standalone server answers and takes writes)")


def _check_from_hello(
    exp: Experiment,
    conn: DirectConnection,
    states: Mapping[str, str],
    *,
    env: Mapping[str, str],
    assume_yes: bool,
    confirm: Callable[[str], bool] | None,
    note: Callable[[str], None],
) -> None:
    """A replica set whose primary has no replSetGetStatus (a compatible server that claims
    one in hello): its name and members from the primary's hello, each member's health from
    its own; its votes, oplog and lag cannot be read, and the notes say so."""
    try:
        hello = conn.hello()
    except WireClientError as exc:
        raise GuardRefusal("member health", f"cannot run hello on the primary: {exc}") from exc
    set_name = str(hello.get("setName", "?"))
    _allow(exp, set_name, f"replica set {set_name!r} ({', '.join(states)})", env=env,
           assume_yes=assume_yes, confirm=confirm, note=note)  # fmt: skip
    voting = sum(len(hello.get(key, [])) for key in ("hosts", "passives", "arbiters"))
    quorum = check_quorum(exp.faults, max(voting, 1), allowed=exp.guards.allow_quorum_loss)
    note(f"guard quorum: {quorum}, counting every member the primary's hello lists (the "
         "server has no replSetGetConfig to give their votes)")  # fmt: skip
    oplog = check_oplog_window(exp.faults, None, allowed=exp.guards.allow_oplog_overrun,
                               unknown="the server has no replSetGetStatus")  # fmt: skip
    note(f"guard oplog window: {oplog}")
    unhealthy = {h: s for h, s in states.items() if s not in HEALTHY}
    if unhealthy:
        raise GuardRefusal("member health", _describe(unhealthy))
    note("guard member health: ok (every member healthy by its hello; no replSetGetStatus to "
         "read lag from)")  # fmt: skip


def _command(
    conn: DirectConnection, cmd: dict[str, Any], *, missing_ok: bool = False
) -> dict[str, Any]:
    """A command on the primary; a set whose state cannot be read cannot be vouched for.
    `missing_ok`: a server without the command (CommandNotFound) answers, not refuses."""
    name = next(iter(cmd))
    try:
        reply = conn.command("admin", cmd)
    except WireClientError as exc:
        raise GuardRefusal("member health", f"cannot run {name} on the primary: {exc}") from exc
    if missing_ok and reply.get("code") == COMMAND_NOT_FOUND:
        return reply
    if not reply.get("ok"):
        raise GuardRefusal(
            "member health", f"{name} on the primary {conn.host} failed: {reply.get('errmsg')}"
        )
    return reply


def _fault_summary(faults: Sequence[Fault]) -> str:
    parts = []
    for fault in faults:
        sel = fault.select
        who = (
            sel.member
            if isinstance(sel, SelectMember)
            else f"{sel.count} member(s)"
            if isinstance(sel, SelectCount)
            else describe_selection(sel)
            if isinstance(sel, SelectDomain)
            else f"the {sel}"
        )
        parts.append(f"{fault.kind} {who} at {_secs(fault.at)}")
    return "; ".join(parts)


def _describe(states: Mapping[str, str]) -> str:
    return ", ".join(f"{h} {s}" for h, s in states.items())


def _secs(seconds: float) -> str:
    return "never" if math.isinf(seconds) else f"{seconds:g}s"


def wait_healthy(
    members: list[str],
    sets: Mapping[str, list[str]],
    *,
    options: ConnectOptions,
    timeout_s: float,
    sleep: Callable[[float], None],
) -> None:
    """Every member healthy and each replica set with one primary before anything is broken.

    A set just started (or catching up) gets `timeout_s` to settle; one that does not is
    refused by the member-health guard.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        states = current_states(members, options=options)
        unhealthy = {h: s for h, s in states.items() if s not in HEALTHY}
        if not unhealthy and all(
            sum(states[h] in PRIMARY_LIKE for h in hosts) == 1 for hosts in sets.values()
        ):
            return
        if time.monotonic() > deadline:
            which = "each replica set" if len(sets) > 1 else "the set"
            raise GuardRefusal(
                "member health",
                f"after {timeout_s:.0f}s {which} still does not have every member PRIMARY, "
                f"SECONDARY or ARBITER and one primary ({_describe(states)})",
            )
        sleep(0.25)
