"""Which member a fault's `select:` means right now: from each member's own replSetGetStatus, or
from the failover probe's latest hello answers when they are fresh."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from rsdrill.connection import AccessRefused, ConnectOptions
from rsdrill.errors import RsdrillError
from rsdrill.experiment.schema import SelectCount, Selection, SelectMember
from rsdrill.history import Op
from rsdrill.platforms.base import TargetError
from rsdrill.states import PRIMARY_LIKE, member_state


class SelectionError(RsdrillError):
    """The selection matches nothing in the live replica set; the fault is not injected."""


def _state(host: str, timeout_s: float, options: ConnectOptions) -> str:
    try:
        return member_state(host, timeout_s, options=options)
    except AccessRefused as exc:  # not down: unreachable with these settings, say so now
        raise TargetError(str(exc)) from None


def current_states(
    members: list[str], timeout_s: float = 0.3, *, options: ConnectOptions
) -> dict[str, str]:
    """Each member's own state (PRIMARY, SECONDARY, ...), DOWN when it does not answer."""
    with ThreadPoolExecutor(max_workers=max(len(members), 1)) as pool:
        states = pool.map(lambda h: _state(h, timeout_s, options), members)
        return dict(zip(members, states, strict=True))


def resolve(selection: Selection, states: dict[str, str]) -> list[str]:
    """The hosts a selection names, given every member's current state (in config order)."""
    if isinstance(selection, SelectMember):
        if selection.member not in states:
            raise SelectionError(f"{selection.member} is not a member ({', '.join(states)})")
        return [selection.member]
    if isinstance(selection, SelectCount):
        pool = [h for h, s in states.items() if _fits(s, selection.role)]
        # The primary last: counting members down should hit secondaries first.
        pool.sort(key=lambda h: states[h] == "PRIMARY")
        if len(pool) < selection.count:
            raise SelectionError(
                f"select count {selection.count} ({selection.role}): only "
                f"{len(pool)} such member(s): {_describe(states)}"
            )
        return pool[: selection.count]
    wanted = selection.upper()
    # `primary` is the member that takes the writes: a standalone server is one.
    accepted = PRIMARY_LIKE if wanted == "PRIMARY" else {wanted}
    matches = [h for h, s in states.items() if s in accepted]
    if not matches:
        raise SelectionError(f"select {selection}: no member is {wanted} now: {_describe(states)}")
    return matches[:1]


def _fits(state: str, role: str) -> bool:
    if role == "secondary":
        return state == "SECONDARY"
    if role == "data":
        return state not in ("ARBITER", "DOWN")
    return state != "DOWN"


def _describe(states: dict[str, str]) -> str:
    return ", ".join(f"{h} {s}" for h, s in states.items())


def states_from_hellos(
    ops: list[Op], members: list[str], *, since_s: float, now_s: float, max_age_s: float
) -> dict[str, str] | None:
    """Every member's role from the failover probe's latest hello, or None if one is unknown.

    This costs no network round trip at injection time (a frozen member makes the live query
    wait out its timeout). An answer counts only when it describes the member after `since_s`
    (the last fault injected or reverted, which may have changed the roles; see
    `_describes_after`) and ended within `max_age_s` of `now_s`; a hello that failed is DOWN,
    as in `member_state`. An answer that names no role (a primary still draining, a member
    starting up) leaves the member unknown.
    """
    latest: dict[str, Op] = {}
    for answer in ops:
        if answer.op == "hello" and answer.member in members and _describes_after(answer, since_s):
            latest[answer.member] = answer  # ops are in the order they ended: the last one wins
    states = {}
    for host in members:
        op = latest.get(host)
        if op is None or now_s - op.t_end > max_age_s:
            return None
        if not op.ok:
            states[host] = "DOWN"
        elif op.detail.get("writable"):
            states[host] = "PRIMARY"
        elif op.detail.get("secondary"):
            states[host] = "SECONDARY"
        elif op.detail.get("arbiter"):
            states[host] = "ARBITER"
        else:
            return None
    return states


def _describes_after(op: Op, since_s: float) -> bool:
    """Whether a hello op tells the member's state after `since_s`. A polled answer may have
    been read before it unless it was asked after it. An awaited answer is read when it is sent
    (at once on a change, else after maxAwaitTimeMS), and a member that did not answer did not
    answer at the op's end: both tell the state as of their end. (Waiting for a frozen member's
    awaited hello that started after the fault delays the next fault by max_await + timeout.)"""
    if op.ok and not op.detail.get("awaited"):
        return op.t_start > since_s
    return op.t_end > since_s
