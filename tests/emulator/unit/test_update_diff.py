"""Update oplog entries in mongod's `$v: 2` diff form: applying the diff gives the new document
exactly (values, types, field order), and change streams describe it as mongod does."""

from __future__ import annotations

import bson
import pytest

from rsdrill_emulator.updatediff import apply, describe, diff, update_entry

OLD = {"_id": 1, "a": {"b": 1, "c": 2}, "arr": ["x", {"y": 1}, 3, 4], "gone": True, "n": 1}
NEW = {"_id": 1, "a": {"b": 5, "c": 2}, "arr": ["x", {"y": 2}], "n": 1.0, "new": [1]}

PAIRS = [
    (OLD, NEW),
    (OLD, OLD),
    ({"_id": 1, "a": 1, "b": 2, "c": 3}, {"_id": 1, "c": 3, "a": 1, "b": 2}),  # reordered
    ({"_id": 1, "a": 1}, {"_id": 1, "z": 0, "a": 1}),  # a field inserted before another
    ({"_id": 1, "a": [1, 2]}, {"_id": 1, "a": [1, 2, 3, 4]}),  # an array grown
    ({"_id": 1, "a": {"x": 1, "y": 2}}, {"_id": 1, "a": {"y": 2, "x": 1}}),  # nested order
    ({"_id": 1, "a": [1]}, {"_id": 1, "a": {"0": 1}}),  # array → document: replaced whole
]


@pytest.mark.parametrize(("old", "new"), PAIRS)
def test_applying_the_diff_gives_the_new_document_byte_for_byte(old: dict, new: dict) -> None:
    assert bson.encode(apply(old, diff(old, new))) == bson.encode(new)


def test_a_one_field_update_of_a_large_document_is_a_small_entry() -> None:
    old = {"_id": 7, **{f"field{i}": "x" * 100 for i in range(10)}}
    new = old | {"field3": "y" * 100}
    entry = update_entry(old, new, replacement=False)
    assert entry == {"$v": 2, "diff": {"u": {"field3": "y" * 100}}}
    assert len(bson.encode(entry)) < len(bson.encode(new)) / 5
    assert update_entry(old, new, replacement=True) is new


def test_update_descriptions_name_what_changed() -> None:
    assert describe(diff(OLD, NEW)) == {
        # An array element that stays a document changes by a sub-diff, as in mongod's.
        "updatedFields": {"a.b": 5, "arr.1.y": 2, "n": 1.0, "new": [1]},
        "removedFields": ["gone"],
        "truncatedArrays": [{"field": "arr", "newSize": 2}],
    }
    assert describe(diff(OLD, OLD)) == {
        "updatedFields": {},
        "removedFields": [],
        "truncatedArrays": [],
    }


def test_ambiguous_paths_are_spelled_out_with_indices_as_integers() -> None:
    old = {"_id": 1, "a": {"1": 1}, "b": [{"1": 1}], "c": {"x": 1}}
    new = {"_id": 1, "a": {"1": 2}, "b": [{"1": 2}], "c": {"x": 2}}
    description = describe(diff(old, new), disambiguate=True)
    assert description["updatedFields"] == {"a.1": 2, "b.0.1": 2, "c.x": 2}
    # c.x reads one way only; a.1 and b.0.1 could name array elements or fields.
    assert description["disambiguatedPaths"] == {"a.1": ["a", "1"], "b.0.1": ["b", 0, "1"]}
    assert "disambiguatedPaths" not in describe(diff(old, new))
