"""Which chunk the balancer moves, by MongoDB's chunk-count thresholds."""

from __future__ import annotations

from bson.timestamp import Timestamp

from rsdrill_emulator.router.balancer import chunk_to_move, threshold
from rsdrill_emulator.router.routing import Chunk, CollectionRoute


def _route(owners: list[str]) -> CollectionRoute:
    route = CollectionRoute("app.c", {"n": 1}, uuid=None)
    route.chunks = [Chunk({"n": i}, {"n": i + 1}, s, Timestamp(1, i)) for i, s in enumerate(owners)]
    return route


def test_thresholds_are_mongodb_s() -> None:
    assert [threshold(n) for n in (1, 19, 20, 79, 80, 500)] == [2, 2, 4, 4, 8, 8]


def test_the_first_chunk_of_the_fullest_shard_goes_to_the_emptiest() -> None:
    move = chunk_to_move(_route(["a", "b", "a", "a"]), ["a", "b", "c"])
    assert move is not None
    chunk, recipient = move
    assert (chunk.min, chunk.shard, recipient) == ({"n": 0}, "a", "c")


def test_a_difference_below_the_threshold_moves_nothing() -> None:
    assert chunk_to_move(_route(["a", "a", "b"]), ["a", "b"]) is None
    assert chunk_to_move(_route(["a"] * 13 + ["b"] * 10), ["a", "b"]) is None  # 3 < 4
    assert chunk_to_move(_route(["a"] * 14 + ["b"] * 10), ["a", "b"]) is not None
    assert chunk_to_move(_route([]), []) is None
