"""A hashed shard key's value is MongoDB's own: the test vectors of the server's
src/mongo/db/hasher_test.cpp (seed 0) and the manual's $toHashedIndexKey example."""

from __future__ import annotations

from typing import Any

import pytest
from bson.int64 import Int64
from bson.max_key import MaxKey
from bson.min_key import MinKey

from rsdrill_emulator.router.catalog import _initial_chunks
from rsdrill_emulator.router.routing import CollectionRoute
from rsdrill_emulator.shardkey import document_key, equality_key, hash64

VECTORS: list[tuple[Any, int]] = [
    (42, -944302157085130861),
    (0, 4854801880128277513),
    (0.456, 4854801880128277513),  # doubles truncate toward zero before hashing
    (float("nan"), 4854801880128277513),
    (1, 5902408780260971510),
    (1.987, 5902408780260971510),
    (-1, 1140205862565771219),
    (-1.789, 1140205862565771219),
    ("abc", 8478485326885698097),
    ("", 2049396243249673340),
    ({"a": "abc", "b": Int64(123)}, 4771603801758380216),
    ({}, 7980500913326740417),
    ("string to hash", 763543691661428748),
]


@pytest.mark.parametrize(("value", "expected"), VECTORS)
def test_hash64_is_mongodb_s(value: Any, expected: int) -> None:
    assert hash64(value) == expected


def test_a_missing_key_field_is_null_and_a_hashed_one_is_hashed() -> None:
    assert document_key({"a": 1, "b": "hashed"}, {"a": 5}) == {"a": 5, "b": Int64(hash64(None))}


def test_only_equality_on_every_key_field_pins_a_chunk() -> None:
    pattern = {"a": 1, "b": 1}
    assert equality_key(pattern, {"a": 1, "b": {"$eq": 2}}) == {"a": 1, "b": 2}
    assert equality_key(pattern, {"a": 1}) is None
    assert equality_key(pattern, {"a": 1, "b": {"$gt": 2}}) is None


def test_an_empty_hashed_collection_starts_with_two_chunks_per_shard_covering_every_hash() -> None:
    from bson.timestamp import Timestamp

    chunks = _initial_chunks({"k": "hashed"}, "shard0", ["shard0", "shard1"], Timestamp(1, 1))
    assert len(chunks) == 4
    assert isinstance(chunks[0].min["k"], MinKey) and isinstance(chunks[-1].max["k"], MaxKey)
    assert [c.max for c in chunks[:-1]] == [c.min for c in chunks[1:]]
    assert chunks[2].min == {"k": Int64(0)}  # an even count splits at 0 first
    route = CollectionRoute("db.c", {"k": "hashed"}, None, chunks=chunks)
    owners = {route.shard_of_document({"k": i}) for i in range(100)}
    assert owners == {"shard0", "shard1"}
