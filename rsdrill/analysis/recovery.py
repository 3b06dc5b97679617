"""Member recovery: each member's state over time, and how long it took to be healthy again.

Read from the recovery probe: `replSetGetStatus` polled on each member directly; a poll the
member did not answer means it was DOWN.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterator, Sequence

from rsdrill.analysis.polling import transition_time
from rsdrill.history import FaultRecord, Op, batches
from rsdrill.states import HEALTHY


def polled_state(op: Op) -> str:
    """The state a recovery poll saw: the member's own state, "DOWN" if it did not answer."""
    if not op.ok:
        return "DOWN"
    return str(op.detail.get("state", "UNKNOWN"))


def member_states(ops: Sequence[Op]) -> dict[str, list[tuple[float, str]]]:
    """`member_states`: per member, `(t, state)` each time its polled state changed.

    The first observation is included; `t` is the poll's `t_end` rounded to the millisecond;
    polls are taken in `t_end` order.
    """
    states: dict[str, list[tuple[float, str]]] = {}
    for op in _polls(ops):
        assert op.member is not None
        seq = states.setdefault(op.member, [])
        state = polled_state(op)
        if not seq or seq[-1][1] != state:
            seq.append((round(op.t_end, 3), state))
    return states


def recovery_s(ops: Sequence[Op], faults: Sequence[FaultRecord]) -> dict[str, float | None]:
    """`recovery_s`: per reverted fault's target, seconds from the revert to healthy again.

    Healthy means answering with state PRIMARY, SECONDARY, ARBITER or STANDALONE (a server
    without a replica set) and staying so: the
    first poll after `reverted_at_s` from which every later poll of the member is healthy (a
    member that was SECONDARY when a partition healed, then rolled back, recovers when it is
    SECONDARY again after its rollback). The moment is `polling.transition_time(prev, first,
    reverted_at_s)` with `prev` the member's poll before it (unhealthy or unanswered). None if
    the member was not healthy at its last poll before the next fault on it; faults never
    reverted are left out. When
    several faults hit one member, the latest revert wins.
    """
    result: dict[str, float | None] = {}
    reverts = sorted((f.reverted_at_s, f.target) for f in faults if f.reverted_at_s is not None)
    for since, target in reverts:
        healthy = _healthy_at(ops, faults, target, since)
        result[target] = None if healthy is None else healthy - since
    return result


def restart_phases(ops: Sequence[Op], faults: Sequence[FaultRecord], fault: FaultRecord, *,
                   boot_s: float | None) -> dict[str, float | None]:  # fmt: skip
    """The measured phases of a member's return after its host was lost and restarted as HA
    restarts it (`faults[i].detail.ha`), from the fault's times and the recovery polls:

    - `detect_s`: the failure (injection) → the host restarted (the revert: HA declared the
      host failed and powered it on);
    - `boot_s`: → mongod started. Where rsdrill itself waited the host's boot before starting
      the member (`boot_s` given: sandbox, local) that wait; where the host boots by itself (a
      VM) → the member's first answer: the boot, then mongod up to its listening socket;
    - `member_start_s`: → the member healthy again, as `recovery_s` has it (its start-up and
      recovery; in a one-member set, its election);
    - `back_s`: the failure → healthy, their sum.

    A moment the polls did not see leaves its phases (and `back_s`) None.
    """
    killed, restarted = fault.injected_at_s, fault.reverted_at_s
    phases: dict[str, float | None] = dict.fromkeys(
        ("detect_s", "boot_s", "member_start_s", "back_s")
    )
    if killed is None or restarted is None:
        return phases
    phases["detect_s"] = restarted - killed
    if boot_s is not None:
        started: float | None = restarted + boot_s
    else:
        started = _first_answer(ops, fault.target, restarted)
    healthy = _healthy_at(ops, faults, fault.target, restarted)
    if started is not None:
        phases["boot_s"] = boot_s if boot_s is not None else started - restarted
    if started is not None and healthy is not None:
        phases["member_start_s"] = max(healthy - started, 0.0)
    if healthy is not None:
        phases["back_s"] = healthy - killed
    return phases


def _healthy_at(ops: Sequence[Op], faults: Sequence[FaultRecord], target: str,
                since: float) -> float | None:  # fmt: skip
    """When `target` was healthy again for good after `since` (see `recovery_s`)."""
    # Up to the next fault on the member: an outage of its own is not this one's recovery.
    until = min((f.injected_at_s for f in faults if f.target == target
                 and f.injected_at_s is not None and f.injected_at_s > since),
                default=math.inf)  # fmt: skip
    first = before = None  # the first healthy poll after the last sick one, the poll before it
    recent: deque[Op] = deque(maxlen=RECENT_POLLS)
    for op in _polls(ops, target):
        if since < op.t_end <= until:
            if polled_state(op) not in HEALTHY:
                first = None
            elif first is None:
                first, before = op, _last_done(recent, op)
        recent.append(op)
    return None if first is None else transition_time(before, first, since)


def _first_answer(ops: Sequence[Op], target: str, since: float) -> float | None:
    """When `target` first answered a poll after `since` (its mongod listening again)."""
    recent: deque[Op] = deque(maxlen=RECENT_POLLS)
    for op in _polls(ops, target):
        if op.t_end > since and op.ok:
            return transition_time(_last_done(recent, op), op, since)
        recent.append(op)
    return None


RECENT_POLLS = 16
"""How far back `_last_done` looks: a member's polls run one after another, so the poll before
`first` is nearly always the one that ended last."""


def _last_done(recent: deque[Op], first: Op) -> Op | None:
    """The last of `recent` (polls before `first`, in the order they ended) that had ended when
    `first` began."""
    return next((op for op in reversed(recent) if op.t_end <= first.t_start), None)


# Fallback for servers that omit `tooStale` (compatible servers; MongoDB before 4.2): the
# member's infoMessage. Wordings seen: "error RS102 too stale to catch up" (MongoDB up to 4.0),
# "too stale to catch up -- entering maintenance mode" (log, 4.x), and the emulator's
# "too stale to catch up: <source> no longer has our last entry".
_TOO_STALE_TEXT = "too stale to catch up"


def too_stale(ops: Sequence[Op]) -> list[str]:
    """`too_stale`: members that fell off the oplog (their newest entry is older than the
    oldest their sync source still has); they stay RECOVERING until resynced from scratch.

    Read from the member's own replSetGetStatus: its `tooStale: true` (MongoDB 4.2+), or, where
    a server omits that field, its infoMessage saying "too stale to catch up". Sorted by host.
    """
    return sorted(
        {
            op.member
            for op in _polls(ops)
            if op.member
            and (
                op.detail.get("too_stale") is True
                or _TOO_STALE_TEXT in str(op.detail.get("message", "")).lower()
            )
        }
    )


def _polls(ops: Sequence[Op], member: str | None = None) -> Iterator[Op]:
    """The recovery polls of members (of `member` only, if given), in the order they ended; a
    batch at a time (a member is polled once at a time, so its polls keep that order across
    batches)."""
    for batch in batches(ops, "recovery"):
        mine = (op for op in batch if op.member and (member is None or op.member == member))
        yield from sorted(mine, key=lambda o: o.t_end)
