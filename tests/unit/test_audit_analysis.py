"""The audit's comparisons are pure: which member's collections differ from the primary's, which
documents, and the figures a run's result carries."""

from __future__ import annotations

from bson import Timestamp

from rsdrill.analysis.audit import (
    Divergence,
    audit_figures,
    differing_ids,
    divergent,
    oplog_differences,
)
from rsdrill.result import AuditDivergence, AuditInvalid, AuditResult

P, S1, S2 = "p:1", "s:2", "s:3"


def test_a_member_differs_on_a_changed_missing_or_extra_collection() -> None:
    hashes = {
        P: {"shop": {"orders": "a", "users": "b"}},
        S1: {"shop": {"orders": "a", "users": "b"}},
        S2: {"shop": {"orders": "x", "extra": "c"}},
    }
    assert divergent(P, hashes) == [
        Divergence(S2, "shop", "extra"),
        Divergence(S2, "shop", "orders"),
        Divergence(S2, "shop", "users"),
    ]


def test_a_database_only_one_side_has_differs_collection_by_collection() -> None:
    assert divergent(P, {P: {"a": {"c": "1"}}, S1: {}}) == [Divergence(S1, "a", "c")]
    assert divergent(P, {P: {}, S1: {"b": {"d": "1"}}}) == [Divergence(S1, "b", "d")]


def test_the_ids_that_differ_are_changed_missing_then_extra_and_bounded() -> None:
    ours = [(1, "a"), (2, "b"), (3, "c"), ({"k": 1}, "d")]
    theirs = [(1, "a"), (2, "B"), ({"k": 1}, "d"), (9, "z")]
    assert differing_ids(ours, theirs, limit=10) == (2, 3, 9)
    assert differing_ids(ours, theirs, limit=2) == (2, 3)
    assert differing_ids(ours, ours, limit=10) == ()


def test_figures_count_members_only_when_compared() -> None:
    divergence = AuditDivergence(member=S1, database="d", collection="c", ids=["1"])
    compared = AuditResult(consistent=False, caught_up=True, lag_s=0.2,
                           divergences=[divergence, divergence])  # fmt: skip
    assert audit_figures(compared) == (1, 0.2, None)
    validated = AuditResult(consistent=True, caught_up=True, lag_s=0.1, validated=6)
    assert audit_figures(validated) == (0, 0.1, 0)
    invalid = AuditInvalid(member=S1, database="db", collection="c", errors=["corrupt"])
    found = validated.model_copy(update={"consistent": False, "invalid": [invalid]})
    assert audit_figures(found) == (0, 0.1, 1)
    # validate refused on one member: the count would say less than it knows.
    refused = validated.model_copy(update={"validate_error": "h:1: not authorized"})
    assert audit_figures(refused) == (0, 0.1, None)
    not_caught_up = AuditResult(consistent=False, caught_up=False, lag_s=30.0)
    assert audit_figures(not_caught_up) == (None, 30.0, None)
    assert audit_figures(AuditResult(error="down")) == (None, None, None)
    assert audit_figures(None) == (None, None, None)


def _tail(*entries: tuple[int, str]) -> list[tuple[Timestamp, int, str]]:
    """Newest first, as the audit reads it: (seconds, digest) → (Timestamp, term 1, digest)."""
    return [(Timestamp(secs, 1), 1, digest) for secs, digest in entries]


def test_oplog_tails_are_compared_over_the_window_both_read() -> None:
    primary = _tail((9, "i"), (8, "h"), (7, "g"), (6, "f"))
    same_shorter = _tail((9, "i"), (8, "h"))  # a shorter tail: compared from its oldest (8)
    assert oplog_differences(P, {P: primary, S1: same_shorter}) == []
    changed = _tail((9, "i"), (8, "H"), (7, "g"))
    lacking = _tail((9, "i"), (7, "g"), (6, "f"))
    extra = [*_tail((9, "i")), (Timestamp(8, 2), 1, "x"), *_tail((8, "h"), (7, "g"))]
    # Written after the members caught up: past the window both read, not a difference.
    later = _tail((11, "k"), (10, "j"), (9, "i"), (8, "h"), (7, "g"))
    found = oplog_differences(P, {P: primary, S1: changed, S2: lacking, "t:4": extra,
                                  "u:5": later})  # fmt: skip
    assert [(d.member, d.ts, d.reason) for d in found] == [
        (S1, Timestamp(8, 1), "differs"), (S2, Timestamp(8, 1), "missing"),
        ("t:4", Timestamp(8, 2), "extra"),
    ]  # fmt: skip
    # An entry in another term at the same moment is another entry.
    other_term = [(Timestamp(9, 1), 2, "i"), *primary[1:]]
    assert {d.reason for d in oplog_differences(P, {P: primary, S1: other_term})} == {
        "missing",
        "extra",
    }
    assert [d.reason for d in oplog_differences(P, {P: primary, S1: []})] == ["missing"] * 4
