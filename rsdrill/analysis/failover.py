"""Failover: from a fault to a primary of a new term accepting writes, and where that time went.

Read from the failover probe (a direct connection to each member polling `hello`), the recovery
probe (`replSetGetStatus` with `electionCandidateMetrics`) and the write probe.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from rsdrill.analysis.availability import longest_gap
from rsdrill.analysis.polling import transition_time
from rsdrill.history import FaultRecord, Op, of_probes
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
    return longest_gap(
        of_probes(ops, "failover"),
        writable,
        held=lambda op: op.detail.get("held_writable") is True,
    )


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
    polls = sorted((op for op in of_probes(ops, "failover") if op.member), key=_end)
    injected = sorted((f for f in faults if f.injected_at_s is not None), key=_injected)
    next_injections = [*map(_injected, injected[1:]), math.inf]
    contested = len({op.member for op in polls}) > 1
    for fault, until in zip(injected, next_injections, strict=False):
        t0 = _injected(fault)
        before = next((op for op in reversed(polls) if op.t_end <= t0 and writable(op)), None)
        if before is None or before.member is None:
            continue
        old, term = before.member, before.detail.get("election_id")

        def new_primary(op: Op, old: str = old, term: object = term) -> bool:
            if op.member != old:
                return True
            now = op.detail.get("election_id")
            return contested and None not in (term, now) and now != term

        first = next(
            (op for op in polls if t0 < op.t_end < until and writable(op) and new_primary(op)),
            None,
        )
        if first is None or first.member is None:
            continue
        not_writable = [
            op
            for op in polls
            if op.member == first.member
            and op.ok
            and not writable(op)
            and op.t_end <= first.t_start
        ]
        prev = not_writable[-1] if not_writable else None
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
    statuses = sorted((op for op in of_probes(ops, "recovery") if op.ok), key=_end)
    seen = [term for op in statuses if op.t_end <= t0 for term in _terms(op)]
    newest = max(seen, default=None)
    called: float | None = None
    for op in statuses:
        election = op.detail.get("election")
        if op.member != failover.new_primary or op.t_end <= t0 or not isinstance(election, dict):
            continue
        if newest is None or election.get("term", -math.inf) > newest:
            called = election.get("called_s")
            break
    served = [
        op.t_end
        for op in of_probes(ops, "write")
        if op.ok and op.member == failover.new_primary and op.t_end >= failover.writable_at_s
    ]
    return FailoverParts(
        detection_s=None if called is None else called - t0,
        election_s=None if called is None else failover.writable_at_s - called,
        client_rediscovery_s=min(served) - failover.writable_at_s if served else None,
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
