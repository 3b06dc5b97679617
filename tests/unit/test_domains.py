"""Failure domains from member tags, and which zone's loss takes the voting majority."""

from __future__ import annotations

import pytest

from rsdrill.domains import (
    Placement,
    PlatformPlace,
    by_zone,
    describe,
    majority_losing_zones,
    majority_warning,
    placed_by_platform,
    placement,
    spread,
)
from rsdrill.sandbox.config import ReplSetSpec, build_topology


def _members(zones: str, votes: str = "") -> list[Placement]:
    return [Placement(f"h{i}", int(votes[i]) if votes else 1, z if z != "-" else None)
            for i, z in enumerate(zones)]  # fmt: skip


def test_zones_are_given_round_robin_in_member_order() -> None:
    assert spread(["a", "b", "c"], 5) == ["a", "b", "c", "a", "b"]
    assert spread(["a", "a", "b"], 3) == ["a", "a", "b"]
    assert spread([], 3) == []


@pytest.mark.parametrize("zones", [["a", "b", "c", "d"], ["a", ""], [" a"]])
def test_a_zone_nobody_is_in_or_a_blank_name_is_refused(zones: list[str]) -> None:
    with pytest.raises(ValueError):
        spread(zones, 3)


def test_a_member_s_zone_and_region_come_from_its_tags() -> None:
    tags = {"dc": "east", "region": "eu"}
    assert placement("h", 1, tags) == Placement("h", 1, "east", "eu", tuple(tags.items()))
    assert placement("h", 0, {"use": "reporting"}) == Placement(
        "h", 0, None, None, (("use", "reporting"),)
    )


def test_the_platform_s_place_wins_over_the_tags_and_adds_its_own() -> None:
    tagged = placement("h1", 1, {"zone": "east", "rack": "r1", "esxi_host": "old"})
    where = {"h1": PlatformPlace("C1", "DC0", (("esxi_host", "esx-1"),)),
             "h9": PlatformPlace("C2", None, (("esxi_host", "esx-9"),))}  # fmt: skip
    assert placed_by_platform([tagged, Placement("h2", 0, "west")], where) == [
        Placement("h1", 1, "C1", "DC0", (("zone", "east"), ("rack", "r1"), ("esxi_host", "esx-1"))),
        Placement("h2", 0, "west"),  # the platform does not say: its tags
        Placement("h9", 1, "C2", None, (("esxi_host", "esx-9"),)),  # the platform's alone
    ]  # fmt: skip
    # A place the platform leaves blank keeps the tags' word.
    assert placed_by_platform([tagged], {"h1": PlatformPlace()}) == [tagged]


@pytest.mark.parametrize(("zones", "votes", "losing"), [
    ("abc", "", []),           # one member per zone: any one zone may go
    ("aab", "", ["a"]),        # 2+1: the bigger data centre holds the majority
    ("abcab", "", []),         # 2-2-1 over three zones
    ("aabbc", "", []),
    ("aaabb", "", ["a"]),      # 3 of 5 in one zone
    ("aab", "101", ["a", "b"]),  # a non-voter: 2 votes, either zone's loss leaves 1
    ("aabb", "", ["a", "b"]),  # an even split: either half takes the majority with it
    ("---", "", []),           # no zones: nothing to say
])  # fmt: skip
def test_the_zones_whose_loss_leaves_no_voting_majority(
    zones: str, votes: str, losing: list[str]
) -> None:
    members = _members(zones, votes)
    assert majority_losing_zones(members) == losing
    assert (majority_warning(members) is None) == (not losing)


def test_members_are_described_by_zone() -> None:
    members = _members("ab-a")
    assert list(by_zone(members)) == ["a", "b", ""]
    assert describe(members) == "zone a: h0, h3; zone b: h1; no zone: h2"
    assert "zone a holds 2 of 3 votes" in str(majority_warning(_members("aab")))


def test_the_sandbox_writes_zones_as_member_tags_and_keeps_them(tmp_path) -> None:
    spec = build_topology("rs3", port_base=24000, zones=["a", "a", "b"])
    assert [m.tags for m in spec.members] == [{"zone": "a"}, {"zone": "a"}, {"zone": "b"}]
    spec.write(tmp_path)
    assert ReplSetSpec.read(tmp_path).members == spec.members
    assert build_topology("rs3", port_base=24000).members[0].tags == {}
