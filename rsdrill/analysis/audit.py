"""Whether the members hold the same data: pure comparisons of what each member said.

The reference is the primary. A member diverges on a collection when its dbHash digest differs
from the primary's, or when one of the two lacks the collection; which documents differ comes
from per-document digests of the two, compared by `_id`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from rsdrill.result import AuditResult

# member → database → collection → MD5 hex digest, as dbHash answers.
Hashes = Mapping[str, Mapping[str, Mapping[str, str]]]


@dataclass(frozen=True)
class Divergence:
    """One member's copy of one collection differs from the primary's."""

    member: str
    database: str
    collection: str
    # A bounded sample of the `_id`s whose documents differ, are missing or are extra.
    ids: tuple[Any, ...] = field(default=())
    # How many documents the primary's copy and the member's hold (None: not counted).
    counts: tuple[int, int] | None = None


@dataclass(frozen=True)
class Invalid:
    """One member's copy of one collection that its own `validate` found not valid."""

    member: str
    database: str
    collection: str
    errors: tuple[str, ...] = field(default=())


def divergent(reference: str, hashes: Hashes) -> list[Divergence]:
    """Every (member, database, collection) whose digest is not the reference member's."""
    found = []
    ours = hashes[reference]
    for member in sorted(m for m in hashes if m != reference):
        for database in sorted(set(ours) | set(hashes[member])):
            mine = ours.get(database, {})
            theirs = hashes[member].get(database, {})
            for collection in sorted(set(mine) | set(theirs)):
                if mine.get(collection) != theirs.get(collection):
                    found.append(Divergence(member, database, collection))
    return found


def differing_ids(
    reference: Sequence[tuple[Any, str]], other: Sequence[tuple[Any, str]], limit: int
) -> tuple[Any, ...]:
    """The `_id`s (at most `limit`, in the reference's order, then the other's extras) whose
    document digest differs between two `(_id, digest)` listings, or that one lacks."""
    theirs = {_key(doc_id): digest for doc_id, digest in other}
    ours = {_key(doc_id) for doc_id, _ in reference}
    ids = [doc_id for doc_id, digest in reference if theirs.get(_key(doc_id)) != digest]
    ids += [doc_id for doc_id, _ in other if _key(doc_id) not in ours]
    return tuple(ids[:limit])


# One member's newest oplog entries, newest first: (timestamp, term, MD5 of the entry's BSON).
OplogTail = Sequence[tuple[Any, int | None, str]]


@dataclass(frozen=True)
class OplogDifference:
    """An entry in the window both oplog tails cover that one member lacks, has extra, or holds
    in another form than the primary's."""

    member: str
    ts: Any
    term: int | None
    reason: Literal["missing", "extra", "differs"]


def oplog_differences(reference: str, tails: Mapping[str, OplogTail]) -> list[OplogDifference]:
    """Every member's oplog tail against the reference's, over the window both read: from the
    later of the two tails' oldest entries to the earlier of their newest (a write after the
    members caught up is not a difference): the same entries, byte for byte."""
    ours = {(ts, term): digest for ts, term, digest in tails[reference]}
    found = []
    for member in sorted(m for m in tails if m != reference):
        theirs = {(ts, term): digest for ts, term, digest in tails[member]}
        if not ours or not theirs:
            found += [OplogDifference(member, ts, term, "missing" if ours else "extra")
                      for ts, term in (ours or theirs)]  # fmt: skip
            continue
        since = max(min(ts for ts, _ in ours), min(ts for ts, _ in theirs))
        until = min(max(ts for ts, _ in ours), max(ts for ts, _ in theirs))
        for ts, term in sorted(set(ours) | set(theirs), key=lambda key: key[0]):
            if not since <= ts <= until:
                continue
            if (ts, term) not in theirs:
                found.append(OplogDifference(member, ts, term, "missing"))
            elif (ts, term) not in ours:
                found.append(OplogDifference(member, ts, term, "extra"))
            elif ours[(ts, term)] != theirs[(ts, term)]:
                found.append(OplogDifference(member, ts, term, "differs"))
    return found


def audit_figures(audit: AuditResult | None) -> tuple[int | None, float | None, int | None]:
    """(divergent_members, audit_lag_s, validate_errors) of a run's audit: members are counted
    only when they were compared (None otherwise: not caught up, or not comparable), and
    invalid collections only when every one was validated."""
    if audit is None:
        return None, None, None
    counted = (
        None
        if audit.consistent is None or not audit.caught_up
        else len({d.member for d in audit.divergences})
    )
    invalid = None if audit.validated is None or audit.validate_error else len(audit.invalid)
    return counted, audit.lag_s, invalid


def _key(doc_id: Any) -> str:
    # `_id`s of any BSON type (dicts included) as a hashable key; equal values, equal keys.
    return repr(doc_id)
