"""`select:` by failure domain: a zone, a region, or tags every selected member carries, as the
members' replica-set tags place them; down members are left out, and a domain nobody is in (or
whose members are all down) is said with what there is."""

from __future__ import annotations

import pytest

from rsdrill.domains import placement
from rsdrill.engine.selection import SelectionError, resolve
from rsdrill.experiment.loader import ExperimentError, load_experiment_text
from rsdrill.experiment.schema import SelectDomain

PLACED = [
    placement("h:1", 1, {"zone": "east", "region": "eu", "rack": "r1"}),
    placement("h:2", 1, {"zone": "east", "region": "eu", "rack": "r2"}),
    placement("h:3", 1, {"zone": "west", "region": "us", "rack": "r1"}),
]
STATES = {"h:1": "PRIMARY", "h:2": "SECONDARY", "h:3": "SECONDARY"}


@pytest.mark.parametrize(
    ("select", "hosts"),
    [
        ({"zone": "east"}, ["h:1", "h:2"]),
        ({"region": "us"}, ["h:3"]),
        ({"tag": {"rack": "r1"}}, ["h:1", "h:3"]),
        ({"tag": {"rack": "r1", "region": "eu"}}, ["h:1"]),
    ],
)
def test_a_domain_is_the_members_its_tags_place_in_it(select: dict, hosts: list[str]) -> None:
    assert resolve(SelectDomain(**select), STATES, None, PLACED) == hosts


def test_down_members_are_left_out_and_an_empty_domain_says_what_there_is() -> None:
    down = {**STATES, "h:1": "DOWN"}
    assert resolve(SelectDomain(zone="east"), down, None, PLACED) == ["h:2"]
    with pytest.raises(SelectionError, match=r"every member of region us is down"):
        resolve(SelectDomain(region="us"), {**STATES, "h:3": "DOWN"}, None, PLACED)
    with pytest.raises(
        SelectionError,
        match=r"no member is in tag rack=r9 \(the members' "
        r"tags: zone=east, region=eu, rack=r1, rack=r2, zone=west, region=us\)",
    ):
        resolve(SelectDomain(tag={"rack": "r9"}), STATES, None, PLACED)


@pytest.mark.parametrize(
    ("select", "message"),
    [
        ("{zone: a, region: b}", "faults[0].select: select one domain: zone, region, tag or "
                                 "domains (not zone and region)"),
        ("{domains: majority}", "faults[0].select.domains: no zone holds a majority of the 3 "
                                "votes (a: 1, b: 1, c: 1)"),
        ("{region: eu}", "faults[0].select.region: no member is in region eu: target.zones "
                         "has a, b, c"),
        ("{tag: {zone: d}}", "faults[0].select.tag: no member is in tag zone=d"),
    ],
)  # fmt: skip
def test_a_domain_selection_a_sandbox_cannot_hold_is_bad_input(select: str, message: str) -> None:
    text = ("name: x\ntarget: {platform: sandbox, topology: rs3, zones: [a, b, c]}\nfaults:\n"
            f"  - {{at: 5s, kind: host-kill, duration: 5s, select: {select}}}\n")  # fmt: skip
    with pytest.raises(ExperimentError) as refused:
        load_experiment_text(text, "x.yaml", {})
    assert message in str(refused.value), str(refused.value)
    # A tag the sandbox's members do carry is a domain like their zone.
    ok = text.replace(select, "{tag: {zone: b}}")
    assert load_experiment_text(ok, "x.yaml", {}).faults[0].select == SelectDomain(
        tag={"zone": "b"}
    )


def test_a_zone_named_by_what_its_loss_costs() -> None:
    """Of 2+1, the majority zone is east and the minority west; of one zone each, every zone
    is a minority (the primary's is chosen) and none a majority; of 2+2, losing either leaves
    no majority: both are majority zones, none a minority."""
    assert resolve(SelectDomain(domains="majority"), STATES, None, PLACED) == ["h:1", "h:2"]
    assert resolve(SelectDomain(domains="minority"), STATES, None, PLACED) == ["h:3"]
    spread = [placement(f"h:{i}", 1, {"zone": z}) for i, z in enumerate("abc", 1)]
    states = {"h:1": "SECONDARY", "h:2": "PRIMARY", "h:3": "SECONDARY"}
    assert resolve(SelectDomain(domains="minority"), states, None, spread) == ["h:2"]
    with pytest.raises(SelectionError, match=r"no zone holds a majority of the 3 votes"):
        resolve(SelectDomain(domains="majority"), states, None, spread)
    halves = [placement(f"h:{i}", 1, {"zone": z}) for i, z in enumerate("aabb", 1)]
    four = {"h:1": "SECONDARY", "h:2": "SECONDARY", "h:3": "PRIMARY", "h:4": "SECONDARY"}
    assert resolve(SelectDomain(domains="majority"), four, None, halves) == ["h:3", "h:4"]
    # The primary unknown (the guards, before the run): the zone of the most votes.
    assert SelectDomain(domains="minority").among(PLACED) == SelectDomain(zone="west")
    assert str(SelectDomain(domains="majority")) == "the zone holding a majority of the votes"
