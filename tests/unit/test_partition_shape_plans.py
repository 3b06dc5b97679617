"""Jepsen's partition shapes as member pairs cut both ways, around the selected member."""

from __future__ import annotations

import pytest

from rsdrill.errors import InjectionError
from rsdrill.platforms.machine.network import shape_cuts
from rsdrill.platforms.partition_shapes import cut_pairs

FIVE = [f"127.0.0.1:{p}" for p in range(27001, 27006)]
A, B, C, D, E = FIVE


def _reach(pairs: list[tuple[str, str]], member: str, members: list[str]) -> set[str]:
    cut = {frozenset(p) for p in pairs}
    return {m for m in members if m != member and frozenset((m, member)) not in cut}


def test_one_cuts_the_selected_member_from_every_other() -> None:
    pairs = cut_pairs("one", C, FIVE)
    assert _reach(pairs, C, FIVE) == set()
    assert _reach(pairs, A, FIVE) == {B, D, E}


def test_halves_put_the_selected_member_on_the_smallest_minority() -> None:
    pairs = cut_pairs("halves", C, FIVE)
    assert _reach(pairs, C, FIVE) == {A}  # C and A: 2 of 5
    assert _reach(pairs, B, FIVE) == {D, E}  # the majority: 3 of 5
    assert cut_pairs("halves", A, FIVE[:3]) == [(A, B), (A, C)]


def test_bridge_joins_two_halves_through_the_selected_member_only() -> None:
    pairs = cut_pairs("bridge", C, FIVE)
    assert _reach(pairs, C, FIVE) == {A, B, D, E}
    assert _reach(pairs, A, FIVE) == {B, C}
    assert _reach(pairs, E, FIVE) == {D, C}
    three = cut_pairs("bridge", B, FIVE[:3])
    assert three == [(A, C)]


def test_ring_leaves_each_member_its_two_neighbours() -> None:
    pairs = cut_pairs("ring", A, FIVE)
    for i, member in enumerate(FIVE):
        assert _reach(pairs, member, FIVE) == {FIVE[(i - 1) % 5], FIVE[(i + 1) % 5]}
    with pytest.raises(InjectionError, match="nothing is cut"):
        cut_pairs("ring", A, FIVE[:3])


def test_each_pair_is_cut_once_both_ways() -> None:
    cuts = shape_cuts(cut_pairs("bridge", C, FIVE))
    assert sorted((c.port, c.peers) for c in cuts) == [(27001, (27004, 27005)),
                                                       (27002, (27004, 27005))]  # fmt: skip
    assert {(c.isolate_from, c.direction) for c in cuts} == {("members", "both")}
