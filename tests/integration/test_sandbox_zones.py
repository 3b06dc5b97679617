"""A sandbox placed in zones: each member's zone is its replica-set tag, as mongod keeps it,
so what reads tags elsewhere works: pymongo's server selection by read-preference tag sets
(its own code, nobody's here), and `rsdrill check`, which shows the members by zone and warns
of a layout whose one zone holds the voting majority (two data centres, 2+1)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pymongo import MongoClient
from pymongo.read_preferences import Nearest

from rsdrill.sandbox.cluster import Sandbox
from tests.e2e.catalog import catalog
from tests.e2e.local_set import local_target
from tests.e2e.test_check import _check


def test_a_read_for_one_zone_is_served_by_that_zone_s_members_only(
    replset: Callable[..., Sandbox], client_for: Callable[..., MongoClient[Any]]
) -> None:
    sandbox = replset("rs3", zones=["east", "east", "west"])
    client = client_for(sandbox)
    config = client.admin.command("replSetGetConfig")["config"]
    assert [m["tags"] for m in config["members"]] == [{"zone": "east"}, {"zone": "east"},
                                                      {"zone": "west"}]  # fmt: skip
    west = sandbox.spec.members[2].host
    assert client_for(west).admin.command("hello")["tags"] == {"zone": "west"}
    for zone, expected in (("west", {west}), ("east", {m.host for m in sandbox.spec.members[:2]})):
        db = client.get_database("test", read_preference=Nearest(tag_sets=[{"zone": zone}]))
        served = set()
        for _ in range(30):
            cursor = db["t"].find({})
            cursor.to_list()
            assert cursor.address is not None
            served.add(f"{cursor.address[0]}:{cursor.address[1]}")
        assert served <= expected, (zone, served)
        assert served, zone


def test_check_shows_the_zones_and_warns_when_one_holds_the_majority(
    replset: Callable[..., Sandbox], tmp_path: Path
) -> None:
    sandbox = replset("rs3", zones=["east", "east", "west"])
    document = catalog("rs3-stepdown")
    document["target"] = local_target(sandbox.directory)
    code, output = _check(tmp_path, document)
    assert code == 0, output
    [line] = [x for x in output.splitlines() if "failure domains" in x]
    hosts = [m.host for m in sandbox.spec.members]
    assert line.startswith("!"), line  # a warning: the run may go on
    assert f"zone east: {hosts[0]}, {hosts[1]}; zone west: {hosts[2]}" in line
    assert "zone east holds 2 of 3 votes" in line
