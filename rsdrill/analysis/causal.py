"""The causal-consistency checker: what each session of the causal probe saw, against the
guarantees MongoDB's causally consistent sessions give (read and write concern majority).

Each client of the probe owns one document and alternates, in one causally consistent session,
a write to it (`$inc n`, `last` set to the write's seq, `after` set to the `last` it read of
every other document) and a read of every document in one query. A read holds one snapshot, so:

- `read-your-writes`: a read shows the session's own document at least at its newest
  acknowledged write;
- `monotonic-reads`: no document goes back (`n` or `last` lower) between two reads of a session;
- `monotonic-writes`: a document at write `last` has every acknowledged write of its client
  with a lower seq applied too (`n` counts them): a session's writes apply in its order;
- `writes-follow-reads`: a document whose newest write was made after its client read another
  document at `last` q shows, in the same snapshot, that document at q or later.

A write that failed may or may not have been applied: only acknowledged ones are owed. Pure
functions of the history.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rsdrill.history import CAUSAL_PROBE, Op, of_probes

KINDS = ("read-your-writes", "monotonic-reads", "monotonic-writes", "writes-follow-reads")


@dataclass(frozen=True)
class DocState:
    """A document as one read saw it."""

    n: int
    last: int
    after: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, value: Any) -> DocState:
        n, last, after = value
        return cls(int(n), int(last), {str(k): int(v) for k, v in (after or {}).items()})


@dataclass(frozen=True)
class CausalViolation:
    kind: str
    client: int
    t: float
    words: str


@dataclass
class CausalReport:
    reads_checked: int = 0
    violations: list[CausalViolation] = field(default_factory=list)

    @property
    def kinds(self) -> list[str]:
        """The kinds found, in KINDS order."""
        found = {v.kind for v in self.violations}
        return [k for k in KINDS if k in found]

    def firsts(self) -> list[CausalViolation]:
        """The first violation of each kind found, in KINDS order."""
        return [next(v for v in self.violations if v.kind == kind) for kind in self.kinds]


def check(ops: Sequence[Op]) -> CausalReport:
    """Every violation in the causal probe's history (each read judged once per kind)."""
    mine = sorted(of_probes(ops, CAUSAL_PROBE), key=lambda op: op.t_start)
    # Every acknowledged seq of every document's writer (for monotonic writes).
    acked: dict[str, list[int]] = {}
    for op in mine:
        if op.op == "write" and op.ok:
            acked.setdefault(op.detail["key"], []).append(int(op.detail["seq"]))
    report = CausalReport()
    newest_acked: dict[int, int] = {}  # client → its newest write acknowledged so far
    seen: dict[tuple[int, str], DocState] = {}  # (client, key) → its session's previous read
    for op in mine:
        client = int(op.detail["client"])
        if op.op == "write":
            if op.ok:
                newest_acked[client] = max(newest_acked.get(client, 0), int(op.detail["seq"]))
            continue
        if op.op != "read" or not op.ok:
            continue
        report.reads_checked += 1
        docs = {key: DocState.of(value) for key, value in op.detail["docs"].items()}
        report.violations += _judge(op, client, docs, newest_acked.get(client, 0), seen, acked)
        for key, doc in docs.items():
            seen[(client, key)] = doc
    return report


def _judge(
    op: Op,
    client: int,
    docs: dict[str, DocState],
    own_acked: int,
    seen: dict[tuple[int, str], DocState],
    acked: dict[str, list[int]],
) -> list[CausalViolation]:
    found: list[CausalViolation] = []

    def say(kind: str, words: str) -> None:
        if all(v.kind != kind for v in found):  # one of each kind per read
            found.append(CausalViolation(kind, client, op.t_start, f"t+{op.t_start:.3f}s client "
                                         f"{client}: {words}"))  # fmt: skip

    own = docs.get(str(op.detail["key"]))
    if own is not None and own.last < own_acked:
        say("read-your-writes", f"read its own document at write {own.last} after its write "
            f"{own_acked} was acknowledged")  # fmt: skip
    for key, doc in docs.items():
        before = seen.get((client, key))
        if before is not None and (doc.last < before.last or doc.n < before.n):
            say("monotonic-reads", f"read {key} at write {doc.last} (n {doc.n}) after reading "
                f"it at write {before.last} (n {before.n})")  # fmt: skip
        owed = sum(1 for seq in acked.get(key, ()) if seq <= doc.last)
        if doc.n < owed:
            say("monotonic-writes", f"read {key} at write {doc.last} with {doc.n} writes applied, "
                f"though {owed} acknowledged writes up to it were")  # fmt: skip
        for other, q in doc.after.items():
            if other in docs and docs[other].last < q:
                say("writes-follow-reads", f"read {key} at a write made after its writer read "
                    f"{other} at write {q}, and {other} at write {docs[other].last} in the "
                    "same snapshot")  # fmt: skip
    return found
