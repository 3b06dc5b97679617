"""The soak's invariants, judged from one run's history (pure functions, no I/O):

- `lost-write`: an acknowledged w:majority write is missing after recovery (the durability
  probe's read-back, as `lost_acknowledged_writes`);
- `unaccounted-loss`: an acknowledged write durable on the primary (j:true or w:majority) is
  missing after recovery and in no member's rollback files (the audit's rollback accounting);
- `two-primaries`: two members reported themselves writable primary under one electionId (one
  term); the failover probe's hellos;
- `recovery`: a member not back to SECONDARY (or PRIMARY/ARBITER) within the SLO after its
  last fault was reverted, or not healthy when the run ended;
- `monotonic-reads`: a read of the register's causal session saw an older value than an earlier
  one (the writer sets 1, 2, 3, ... so the committed value only grows);
- `linearizable`: the register's reads and writes admit no linearization (a single-register
  model, as Jepsen's Knossos checks; searched with Wing & Gong's algorithm and Lowe's cache);
- `divergence` / `invalid` / `oplog-divergence` / `not-caught-up`: the run's data audit found a
  member whose data differs from the primary's once all had applied the same writes, a
  collection a member's own validate found not valid, an oplog entry not the primary's, or
  members that never caught up;
- the transactions probe's anomalies (G0, G1c, G-single, ...: `analysis.elle`) and the causal
  probe's violations (read-your-writes, monotonic-reads, ...: `analysis.causal`).

A failed write may or may not have taken effect: it is indeterminate (Jepsen's `info`), open
until the end of the history. One whose value no read saw can always be placed last, so it is
left out of the search, which keeps the search small.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rsdrill.analysis.causal import check as check_causal
from rsdrill.analysis.durability import durability, ledger_inserts
from rsdrill.analysis.recovery import polled_state
from rsdrill.history import TXN_PROBE, FaultRecord, Op
from rsdrill.result import AuditResult
from rsdrill.states import HEALTHY

if TYPE_CHECKING:
    from rsdrill.analysis.elle import Model


@dataclass(frozen=True)
class Violation:
    """One broken invariant and what shows it."""

    invariant: str
    detail: str


# -- register operations -------------------------------------------------------------------------


@dataclass(frozen=True)
class RegisterOp:
    """A write of `value` or a read that saw `value`; `end` is inf for an indeterminate write."""

    kind: str  # "write" | "read"
    value: int | None
    start: float
    end: float


def register_ops(ops: Iterable[Op]) -> list[RegisterOp]:
    """The register probe's ops as the checker reads them: successful reads, every write
    (failed ones indeterminate), the initial value 0 as a write before everything."""
    out = [RegisterOp("write", 0, -math.inf, -math.inf)]
    for op in ops:
        if op.probe != "register":
            continue
        if op.op == "write":
            end = op.t_end if op.ok else math.inf
            out.append(RegisterOp("write", op.detail["value"], op.t_start, end))
        elif op.op == "read" and op.ok:
            out.append(RegisterOp("read", op.detail.get("value"), op.t_start, op.t_end))
    return out


def linearizable(history: Sequence[RegisterOp]) -> RegisterOp | None:
    """None when the register history is linearizable; else the read the search could not get
    past (the latest one it reached), which shows the violation."""
    read_values = {op.value for op in history if op.kind == "read"}
    ops = [op for op in history
           if op.kind == "read" or op.end != math.inf or op.value in read_values]  # fmt: skip
    # Events: (time, 0 call / 1 return, op index), calls before returns at the same instant.
    events: list[tuple[float, int, int]] = []
    for i, op in enumerate(ops):
        events.append((op.start, 0, i))
        events.append((op.end, 1, i))
    events.sort()
    # A doubly linked list over the events (node k is events[k], node n the head), so an op's
    # call and return can be lifted out and put back.
    n = len(events)
    head = n
    nxt = [k + 1 if k + 1 < n else -1 for k in range(n)] + [0 if n else -1]
    prv = [head, *range(n - 1), -1]
    call_of: dict[int, int] = {}
    return_of: dict[int, int] = {}
    for k, (_, what, i) in enumerate(events):
        (return_of if what else call_of)[i] = k

    def lift(i: int) -> None:
        for k in (call_of[i], return_of[i]):
            p, q = prv[k], nxt[k]
            nxt[p] = q
            if q != -1:
                prv[q] = p

    def unlift(i: int) -> None:
        for k in (return_of[i], call_of[i]):
            p, q = prv[k], nxt[k]
            nxt[p] = k
            if q != -1:
                prv[q] = k

    state: int | None = None
    done = 0  # bit set of linearized ops
    seen: set[tuple[int, int | None]] = set()
    stack: list[tuple[int, int | None]] = []  # (op index, state before it)
    furthest: RegisterOp | None = None
    entry = nxt[head]
    while entry != -1:
        _, what, i = events[entry]
        op = ops[i]
        if what == 0:
            after = op.value if op.kind == "write" else state
            legal = op.kind == "write" or op.value == state
            key = (done | (1 << i), after)
            if legal and key not in seen:
                seen.add(key)
                stack.append((i, state))
                state, done = after, done | (1 << i)
                lift(i)
                entry = nxt[head]
            else:
                entry = nxt[entry]
        else:
            # A return whose call could not be linearized yet: back up.
            if op.kind == "read" and (furthest is None or op.start > furthest.start):
                furthest = op
            if not stack:
                return furthest or op
            i, state = stack.pop()
            done &= ~(1 << i)
            unlift(i)
            entry = nxt[call_of[i]]
    return None


def monotonic_read_violation(history: Sequence[RegisterOp]) -> tuple[RegisterOp, RegisterOp] | None:
    """The first pair of reads (earlier, later) where the later saw a smaller value."""
    reads = sorted((op for op in history if op.kind == "read"), key=lambda op: op.start)
    highest: RegisterOp | None = None
    for op in reads:
        if highest is not None and (op.value or 0) < (highest.value or 0):
            return highest, op
        if highest is None or (op.value or 0) > (highest.value or 0):
            highest = op
    return None


# -- the other invariants ------------------------------------------------------------------------


def two_primaries(ops: Iterable[Op]) -> tuple[str, list[str]] | None:
    """An electionId under which more than one member of one replica set said it was writable
    primary (a sharded cluster's sets each count their own terms, from the same first one)."""
    writable: dict[tuple[str, str], set[str]] = {}
    for op in ops:
        if op.probe == "failover" and op.ok and op.detail.get("writable") and op.member:
            election = op.detail.get("election_id")
            if election is not None:
                key = (str(op.detail.get("set") or ""), str(election))
                writable.setdefault(key, set()).add(op.member)
    for (name, election), members in writable.items():
        if len(members) > 1:
            return f"{election} of {name}" if name else election, sorted(members)
    return None


def recovery_violations(
    ops: Sequence[Op], faults: Sequence[FaultRecord], slo_s: float
) -> list[str]:
    """Members not healthy within `slo_s` of their last fault's revert, or at the end."""
    polls: dict[str, list[Op]] = {}
    for op in ops:
        if op.probe == "recovery" and op.member:
            polls.setdefault(op.member, []).append(op)
    problems = []
    for member, seen in polls.items():
        seen.sort(key=lambda op: op.t_end)
        if polled_state(seen[-1]) not in HEALTHY:
            problems.append(f"{member} ended {polled_state(seen[-1])}")
            continue
        reverted = [f.reverted_at_s for f in faults if f.target == member and f.reverted_at_s]
        if not reverted:
            continue
        since = max(reverted)
        back = next((op.t_end for op in seen
                     if op.t_end >= since and polled_state(op) in HEALTHY), None)  # fmt: skip
        if back is not None and back - since > slo_s:
            problems.append(f"{member} healthy {back - since:.1f}s after its revert (> {slo_s:g}s)")
    return problems


def check_invariants(
    ops: Sequence[Op],
    faults: Sequence[FaultRecord],
    *,
    lost_acknowledged: Sequence[int],
    recovery_slo_s: float,
    transactions_model: Model = "snapshot-isolation",
) -> list[Violation]:
    """Every invariant the history breaks (empty: none)."""
    found = []
    if lost_acknowledged:
        shown = ", ".join(str(s) for s in list(lost_acknowledged)[:5])
        found.append(Violation("lost-write", f"{len(lost_acknowledged)} acknowledged w:majority "
                               f"write(s) missing after recovery (seq {shown})"))  # fmt: skip
    if (pair := two_primaries(ops)) is not None:
        found.append(Violation("two-primaries", f"electionId {pair[0]}: writable primaries "
                               f"{', '.join(pair[1])}"))  # fmt: skip
    found += [Violation("recovery", p) for p in recovery_violations(ops, faults, recovery_slo_s)]
    history = register_ops(ops)
    if (reads := monotonic_read_violation(history)) is not None:
        first, later = reads
        found.append(Violation("monotonic-reads", f"read {later.value} at "
                               f"t+{later.start:.3f}s after read {first.value} at "
                               f"t+{first.start:.3f}s in one causal session"))  # fmt: skip
    if (stuck := linearizable(history)) is not None:
        found.append(Violation("linearizable", f"no linearization of the register reaches the "
                               f"read of {stuck.value} at t+{stuck.start:.3f}s"))  # fmt: skip
    found += transaction_violations(ops, transactions_model)
    found += [Violation(v.kind, v.words) for v in check_causal(ops).firsts()]
    return found


def audit_violations(audit: AuditResult | None) -> list[Violation]:
    """The data audit's findings: members whose data differs from the primary's once all had
    applied the same writes (`divergence`, one per member), or members that never caught up
    (`not-caught-up`). An audit that could not compare breaks nothing it can show."""
    if audit is None or audit.consistent is None:
        return []
    if not audit.caught_up:
        return [Violation("not-caught-up", f"the members had not applied the primary's last "
                          f"write after {audit.lag_s} s")]  # fmt: skip
    found: dict[str, list[str]] = {}
    for d in audit.divergences:
        found.setdefault(d.member, []).append(
            f"{d.database}.{d.collection} (_id {', '.join(d.ids) or 'none listed'})"
        )
    return [Violation("divergence", f"{member} differs from the primary {audit.primary}: "
                      + "; ".join(where)) for member, where in found.items()] + [
        Violation("invalid", f"{i.member} {i.database}.{i.collection}: {'; '.join(i.errors)}")
        for i in audit.invalid
    ] + [
        Violation("oplog-divergence", f"{o.member} {o.ts} (term {o.term}): {o.reason}")
        for o in audit.oplog_differences[:1]
    ]  # fmt: skip


def unaccounted_losses(ops: Sequence[Op], audit: AuditResult | None) -> list[Violation]:
    """Acknowledged writes the ledger found missing after recovery that no member's rollback
    files hold (`unaccounted-loss`), judged only when every member that rolled back could be
    read. Meant for a ledger whose acknowledgement was durable on the primary (w:1 with j:true):
    a rollback may take such a write, but only into a file."""
    if (
        audit is None
        or not audit.rollbacks_accounted
        or any(not r.readable for r in audit.rollbacks)
    ):
        return []
    lost = durability(ops).lost_acknowledged_seqs
    inserts = ledger_inserts(ops)
    if not lost or not inserts:
        return []
    writer = inserts[0].probe
    kept = {seq for r in audit.rollbacks for w in r.acknowledged if w.probe == writer
            for seq in w.seqs}  # fmt: skip
    gone = [seq for seq in lost if seq not in kept]
    if not gone:
        return []
    shown = ", ".join(map(str, gone[:5]))
    return [Violation("unaccounted-loss", f"{len(gone)} acknowledged write(s) missing after "
                      f"recovery and in no rollback file (seq {shown})")]  # fmt: skip


def transaction_violations(
    ops: Sequence[Op], model: Model = "snapshot-isolation"
) -> list[Violation]:
    """The transactions probe's anomalies (Elle's method), one violation per type, named by it
    (G0, G1c, G-single, G2-item, G1a, G1b, ...), with its shortest cycle or its first case."""
    if not any(op.probe == TXN_PROBE for op in ops):
        return []
    from rsdrill.analysis.elle import check, txns_from_ops  # networkx: only when asked

    report = check(txns_from_ops(ops), model)
    found = []
    for kind in report.anomaly_types:
        cycle = next((c for c in report.cycles if c.type == kind), None)
        found.append(Violation(kind, cycle.path() if cycle else report.first_case(kind)))
    return found
