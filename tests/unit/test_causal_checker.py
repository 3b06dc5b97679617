"""The causal-consistency checker on written-out session histories: each guarantee broken once,
and histories that keep them all (including failed writes that were or were not applied)."""

from __future__ import annotations

from typing import Any

from rsdrill.analysis.causal import check
from rsdrill.analysis.invariants import check_invariants
from rsdrill.history import CAUSAL_PROBE, Op

Doc = tuple[int, int, dict[str, int]]


class Session:
    """One client's ops, in order, 0.1 s apart."""

    def __init__(self, client: int, start: float = 0.0) -> None:
        self.client, self.key, self.t = client, f"c{client}", start
        self.ops: list[Op] = []

    def _op(self, name: str, outcome: str, detail: dict[str, Any]) -> Session:
        detail = {"client": self.client, "key": self.key, **detail}
        self.ops.append(Op(CAUSAL_PROBE, name, "m:1", self.t, self.t + 0.05, outcome, detail))
        self.t += 0.1
        return self

    def write(self, seq: int, ok: bool = True, after: dict[str, int] | None = None) -> Session:
        return self._op("write", "ok" if ok else "timeout", {"seq": seq, "after": after or {}})

    def read(self, **docs: Doc) -> Session:
        return self._op("read", "ok", {"docs": {k: list(v) for k, v in docs.items()}})


def _kinds(*sessions: Session) -> list[str]:
    return check([op for s in sessions for op in s.ops]).kinds


def test_a_session_that_keeps_every_guarantee() -> None:
    a = Session(0).write(1).read(c0=(1, 1, {}), c1=(0, 0, {}))
    a.write(2, ok=False).read(c0=(1, 1, {}), c1=(1, 1, {}))  # the failed write: not applied
    a.write(3).read(c0=(3, 3, {}), c1=(1, 1, {}))  # ... applied after all: n 3
    b = Session(1, 0.05).write(1, after={"c0": 0}).read(c0=(1, 1, {}), c1=(1, 1, {"c0": 0}))
    report = check(a.ops + b.ops)
    assert report.kinds == [] and report.reads_checked == 4


def test_read_your_writes() -> None:
    a = Session(0).write(1).write(2).read(c0=(1, 1, {}))
    assert _kinds(a) == ["read-your-writes"]


def test_monotonic_reads_on_another_sessions_document() -> None:
    a = Session(0).read(c1=(4, 4, {})).read(c1=(3, 3, {}))
    assert _kinds(a) == ["monotonic-reads"]


def test_monotonic_writes_a_later_write_without_an_earlier_acknowledged_one() -> None:
    writer = Session(1).write(1).write(2).write(3)
    # Another session sees write 3 applied with only 2 writes counted: 1 or 2 was skipped.
    reader = Session(0, 1.0).read(c1=(2, 3, {}))
    assert _kinds(writer, reader) == ["monotonic-writes"]
    # A failed write that was not applied owes nothing.
    writer = Session(1).write(1).write(2, ok=False).write(3)
    assert _kinds(writer, Session(0, 1.0).read(c1=(2, 3, {}))) == []


def test_writes_follow_reads_in_one_snapshot() -> None:
    # c1's newest write was made after its client read c0 at 5: a snapshot showing that write
    # must show c0 at 5 or later.
    reader = Session(2).read(c0=(4, 4, {}), c1=(1, 1, {"c0": 5}))
    assert _kinds(reader) == ["writes-follow-reads"]
    assert _kinds(Session(2).read(c0=(5, 5, {}), c1=(1, 1, {"c0": 5}))) == []


def test_each_kind_once_per_read_and_first_examples_in_words() -> None:
    a = Session(0).write(1).write(2).read(c0=(1, 1, {})).read(c0=(0, 0, {}))
    report = check(a.ops)
    assert report.kinds == ["read-your-writes", "monotonic-reads"]
    assert len(report.violations) == 3  # RYW twice, MR once
    [ryw, mr] = report.firsts()
    assert "client 0" in ryw.words and "after its write 2 was acknowledged" in ryw.words
    assert "read c0 at write 0 (n 0) after reading it at write 1 (n 1)" in mr.words


def test_the_soak_names_each_kind_once() -> None:
    a = Session(0).write(1).write(2).read(c0=(1, 1, {})).read(c0=(1, 1, {}))
    found = check_invariants(a.ops, [], lost_acknowledged=[], recovery_slo_s=60)
    assert [v.invariant for v in found] == ["read-your-writes"]
