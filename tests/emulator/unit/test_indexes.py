"""Index specifications and unique-key checks of the emulator (pure parts)."""

from __future__ import annotations

from typing import Any

import pytest
from bson.int64 import Int64

from rsdrill_emulator.indexes import (
    UniqueKeys,
    build_check,
    default_name,
    key_value,
    parse_spec,
    same_index,
)
from rsdrill_emulator.values import QueryError

UNIQUE = {"v": 2, "key": {"a": 1, "b.c": -1}, "name": "a_1_b.c_-1", "unique": True}


def test_names_and_specs() -> None:
    assert default_name({"a": 1, "b.c": -1}) == "a_1_b.c_-1"
    assert parse_spec({"key": {"a": 1}, "name": "a_1", "unique": True}) == {
        "v": 2,
        "key": {"a": 1},
        "name": "a_1",
        "unique": True,
    }
    assert same_index(parse_spec({"key": {"a": 1}, "name": "x"}), {"key": {"a": 1}})
    assert not same_index(parse_spec({"key": {"a": 1}, "name": "x", "unique": True}),
                          {"key": {"a": 1}})  # fmt: skip


@pytest.mark.parametrize(
    ("spec", "code"),
    [
        ({"key": {}, "name": "x"}, 67),
        ({"key": {"a": 0}, "name": "x"}, 67),
        ({"key": {"a": "nope"}, "name": "x"}, 67),
        ({"key": {"a": 1}}, 9),
        ({"key": {"a": 1}, "name": "x", "bogus": 1}, 197),
    ],
)
def test_bad_specs(spec: dict[str, Any], code: int) -> None:
    with pytest.raises(QueryError) as info:
        parse_spec(spec)
    assert info.value.code == code


def test_key_values_missing_sparse_and_partial() -> None:
    assert key_value(UNIQUE, {"a": 1}) == {"a": 1, "b.c": None}
    sparse = {**UNIQUE, "sparse": True}
    assert key_value(sparse, {"z": 1}) is None
    partial = {**UNIQUE, "partialFilterExpression": {"a": {"$gt": 5}}}
    assert key_value(partial, {"a": 1}) is None
    assert key_value(partial, {"a": 6, "b": {"c": 2}}) == {"a": 6, "b.c": 2}


def test_unique_keys_find_clashes_by_value_and_follow_changes() -> None:
    keys = UniqueKeys("db.c", UNIQUE)
    keys.add({"_id": 1, "a": 1, "b": {"c": 1}}, b"1")
    keys.add({"_id": 2, "a": 1, "b": {"c": 2}}, b"2")
    assert keys.clash({"_id": 2, "a": 1, "b": {"c": 2.0}}, b"2") is None  # its own key
    error = keys.clash({"_id": 3, "a": Int64(1), "b": {"c": 2.0}}, b"3")
    assert error is not None and error.code == 11000
    assert error.details == {"keyPattern": {"a": 1, "b.c": -1},
                             "keyValue": {"a": Int64(1), "b.c": 2.0}}  # fmt: skip
    keys.add({"_id": 2, "a": 1, "b": {"c": 5}}, b"2")  # doc 2 changed its key
    assert keys.clash({"_id": 3, "a": 1, "b": {"c": 2}}, b"3") is None
    keys.remove(b"1")
    assert keys.clash({"_id": 3, "a": 1, "b": {"c": 1}}, b"3") is None
    assert keys.clash({"_id": 3, "a": 1, "b": {"c": 5}}, b"3") is not None


def test_building_a_unique_index_fails_on_duplicates() -> None:
    docs = [{"_id": 1, "a": 1, "b": {"c": 1}}, {"_id": 2, "a": 1.0, "b": {"c": 2}}]
    with pytest.raises(QueryError) as info:
        build_check("db.c", {**UNIQUE, "key": {"a": 1}}, docs, repr_key)
    assert info.value.details["keyValue"] == {"a": 1.0}
    build_check("db.c", UNIQUE, docs, repr_key)
    build_check("db.c", {"key": {"a": 1}, "name": "a_1"}, docs, repr_key)  # not unique


def repr_key(doc_id: Any) -> bytes:
    return repr(doc_id).encode()
