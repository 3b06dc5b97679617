"""Failover: from a fault to a primary of a new term accepting writes, and where that time went.

Read from the failover probe (a direct connection to each member polling `hello`), the recovery
probe (`replSetGetStatus` with `electionCandidateMetrics`) and the write probe.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from rsdrill.analysis.availability import window_of
from rsdrill.analysis.polling import transition_time
from rsdrill.history import FaultRecord, Op, batches, column_parts, columns, flags, ops_at
from rsdrill.opcolumns import TIMES
from rsdrill.result import FailoverParts


@dataclass(frozen=True)
class Failover:
    """A change of writable primary attributed to a fault."""

    fault: FaultRecord
    injected_at_s: float
    old_primary: str
    new_primary: str
    writable_at_s: float
    """Estimated moment the new primary became writable (see `polling.transition_time`)."""

    @property
    def seconds(self) -> float:
        """`failover_s`: fault injected → new primary writable."""
        return self.writable_at_s - self.injected_at_s


def writable(op: Op) -> bool:
    """True for a failover poll answered by a member that accepts writes."""
    return op.probe == "failover" and op.ok and op.detail.get("writable") is True


def no_primary_s(ops: Sequence[Op]) -> float | None:
    """`no_primary_s`: the longest window in which no failover poll saw any member writable.

    Successes are failover polls answered with `writable: true` (by whichever member), and the
    whole span of an awaited hello over which a member was proven to stay writable
    (`held_writable`: it answered unchanged, or changed or its socket closed only at the end);
    windows follow `availability.longest_gap`. None without failover polls.
    """
    polls = columns(ops, "failover", fields=TIMES)
    succeeded, held = flags(ops, "failover", writable, _held_writable)
    window = window_of(polls.t_start, polls.t_end, succeeded, held)
    return None if window is None else window[1] - window[0]


def _held_writable(op: Op) -> bool:
    return op.detail.get("held_writable") is True


def find_failover(ops: Sequence[Op], faults: Sequence[FaultRecord]) -> Failover | None:
    """The first fault (by `injected_at_s`) after which the set had a new primary.

    For each injected fault: the old primary is the member of the last failover poll ending at
    or before the injection that saw it writable (a fault with no such poll is skipped: a change
    cannot be told from an unchanged primary). The new primary is the member of the first poll
    answered after the injection, and before the next fault's injection, that saw a new primary
    writable: another member, or the old one elected again for a new term (its `election_id`
    changed: a member restarted fast, as a Kubernetes pod is, may win the election it caused)
    where other members were polled, so could have won. Bounding by the next injection keeps a
    primary fault that follows, say, a secondary fault from being charged to the secondary
    fault. Its writable moment is `transition_time(prev, first, injected_at_s)` with `prev` that
    member's last poll answered not-writable before `first`. None when no fault was followed by
    a new primary (e.g. rs1, whose one member comes back as primary).
    """
    import numpy as np

    polls = columns(ops, "failover", fields=("member", "outcome", "t_start", "t_end", "index"))
    (can_write,) = flags(ops, "failover", writable)
    answered = polls.member >= 0
    order = np.argsort(polls.t_end[answered], kind="stable")
    polls, can_write = polls.where(np.flatnonzero(answered)[order]), can_write[answered][order]
    injected = sorted((f for f in faults if f.injected_at_s is not None), key=_injected)
    next_injections = [*map(_injected, injected[1:]), math.inf]
    contested = len(np.unique(polls.member)) > 1
    for fault, until in zip(injected, next_injections, strict=False):
        t0 = _injected(fault)
        seen = np.flatnonzero((polls.t_end <= t0) & can_write)
        if not len(seen):
            continue
        (before,) = ops_at(ops, [int(polls.index[seen[-1]])])
        assert before.member is not None
        old, term = before.member, before.detail.get("election_id")
        candidates = (t0 < polls.t_end) & (polls.t_end < until) & can_write
        mine = polls.member == polls.code("member", old)
        if contested and term is not None:

            def elected_again(op: Op, term: object = term) -> bool:
                return op.detail.get("election_id") not in (None, term)

            # The old primary again, elected for a new term (its election_id changed).
            (changed,) = flags(ops, "failover", elected_again)
            new = ~mine | changed[answered][order]
        else:
            new = ~mine
        hits = np.flatnonzero(candidates & new)
        if not len(hits):
            continue
        (first,) = ops_at(ops, [int(polls.index[hits[0]])])
        assert first.member is not None
        not_writable = np.flatnonzero(
            (polls.member == polls.code("member", first.member)) & polls.ok & ~can_write
            & (polls.t_end <= first.t_start)
        )  # fmt: skip
        prev = ops_at(ops, [int(polls.index[not_writable[-1]])])[0] if len(not_writable) else None
        return Failover(
            fault=fault,
            injected_at_s=t0,
            old_primary=old,
            new_primary=first.member,
            writable_at_s=transition_time(prev, first, t0),
        )
    return None


def failover_parts(ops: Sequence[Op], failover: Failover) -> FailoverParts:
    """Split `failover_s` into detection, election and client rediscovery.

    - detection_s: `election.called_s` - injection, from the first recovery poll of the new
      primary (answered after the injection) whose `election.term` is newer than every term
      seen in recovery polls answered before the injection;
    - election_s: the writable estimate - `called_s`;
    - client_rediscovery_s: `t_end` of the first successful "write" op served by the new
      primary ending at or after the writable estimate - that estimate.
    Each part is None when its data is missing.
    """
    t0 = failover.injected_at_s
    # Two passes a batch at a time: a day's run has hundreds of thousands of status polls.
    seen = [term for batch in batches(ops, "recovery") for op in batch
            if op.ok and op.t_end <= t0 for term in _terms(op)]  # fmt: skip
    newest = max(seen, default=None)
    called: float | None = None
    for batch in batches(ops, "recovery"):
        for op in sorted(batch, key=_end):
            election = op.detail.get("election")
            if (not op.ok or op.member != failover.new_primary or op.t_end <= t0
                    or not isinstance(election, dict)):  # fmt: skip
                continue
            if newest is None or election.get("term", -math.inf) > newest:
                called = election.get("called_s")
                break
        if called is not None:
            break
    served = math.inf
    for writes in column_parts(ops, "write", fields=("outcome", "member", "t_end")):
        ends = writes.t_end[
            writes.ok
            & (writes.member == writes.code("member", failover.new_primary))
            & (writes.t_end >= failover.writable_at_s)
        ]
        served = min(served, float(ends.min())) if len(ends) else served
    return FailoverParts(
        detection_s=None if called is None else called - t0,
        election_s=None if called is None else failover.writable_at_s - called,
        client_rediscovery_s=(served - failover.writable_at_s if served < math.inf else None),
    )


def _terms(op: Op) -> list[int]:
    election = op.detail.get("election")
    terms = [op.detail.get("term"), election.get("term") if isinstance(election, dict) else None]
    return [t for t in terms if isinstance(t, int)]


def _end(op: Op) -> float:
    return op.t_end


def _injected(fault: FaultRecord) -> float:
    assert fault.injected_at_s is not None
    return fault.injected_at_s
