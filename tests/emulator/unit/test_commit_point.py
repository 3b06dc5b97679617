"""A secondary's commit point, as it learns it from the primary: capped at its own newest
entry only where that entry is on the primary's branch (of the point's term or the primary's).
The rule alone, on a stand-in member state; the soak judges it on real members."""

from __future__ import annotations

from types import SimpleNamespace

from rsdrill_emulator.node import Node
from rsdrill_emulator.oplog import NULL_OPTIME, OpTime


class _Progress:
    def __init__(self) -> None:
        self.fired = 0

    def fire(self) -> None:
        self.fired += 1


def _secondary(term: int, last_applied: OpTime) -> SimpleNamespace:
    return SimpleNamespace(term=term, last_applied=last_applied, commit_point=NULL_OPTIME,
                           progress=_Progress())  # fmt: skip


def test_capped_at_an_entry_of_the_points_term_or_the_primarys() -> None:
    member = _secondary(3, OpTime(3, 100, 1))
    Node.learn_commit_point(member, OpTime(3, 120, 1))  # type: ignore[arg-type]
    assert member.commit_point == OpTime(3, 100, 1) and member.progress.fired == 1
    member = _secondary(4, OpTime(4, 90, 1))  # the primary's own term: its branch
    Node.learn_commit_point(member, OpTime(3, 80, 1))  # type: ignore[arg-type]
    assert member.commit_point == OpTime(3, 80, 1)


def test_not_moved_onto_a_deposed_primarys_entry() -> None:
    # Our newest entry: written in term 3 by a primary frozen and deposed, fetched after term 4
    # began. The term-4 primary's commit point is past it in time, on another branch.
    member = _secondary(4, OpTime(3, 130, 1))
    Node.learn_commit_point(member, OpTime(4, 120, 1))  # type: ignore[arg-type]
    assert member.commit_point == NULL_OPTIME and member.progress.fired == 0
