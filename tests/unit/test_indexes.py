"""Index specifications and unique-key checks of the emulator (pure parts)."""

from __future__ import annotations

from typing import Any

import pytest

from rsdrill.sandbox.emulator.indexes import (
    build_check,
    check_unique,
    default_name,
    key_value,
    parse_spec,
    same_index,
)
from rsdrill.sandbox.emulator.query import QueryError

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


def test_unique_check_reads_documents_only_when_needed() -> None:
    docs = [{"_id": 1, "a": 1, "b": {"c": 1}}, {"_id": 2, "a": 1, "b": {"c": 2}}]

    def no_reads() -> list[dict[str, Any]]:
        raise AssertionError("read the collection without a unique index")

    check_unique("db.c", [{"key": {"a": 1}, "name": "a_1"}], {"_id": 3, "a": 1}, no_reads)
    check_unique("db.c", [UNIQUE], {"_id": 1, "a": 1, "b": {"c": 2.0}} | {"_id": 2}, lambda: docs)
    with pytest.raises(QueryError) as info:
        check_unique("db.c", [UNIQUE], {"_id": 3, "a": 1.0, "b": {"c": 2}}, lambda: docs)
    assert info.value.code == 11000
    assert info.value.details == {"keyPattern": {"a": 1, "b.c": -1},
                                  "keyValue": {"a": 1.0, "b.c": 2}}  # fmt: skip
    with pytest.raises(QueryError):
        build_check("db.c", {**UNIQUE, "key": {"a": 1}}, docs)
    build_check("db.c", UNIQUE, docs)
