"""replSetReconfig on the sandbox emulator, judged by pymongo and by MongoDB's documented rules:
a safe reconfig on the primary reaches every member and the drivers' view (setVersion, tags);
the reconfigs mongod refuses are refused with its codes; a replica set that lost its voting
majority gets a primary again only by a forced reconfig of the survivor, and the lost members,
back and re-added, roll back what the survivor never had (MongoDB's procedure for a lost data
centre)."""

from __future__ import annotations

import copy
import time
from typing import Any

import bson
from pymongo import WriteConcern
from pymongo.read_preferences import Nearest
from pymongo.server_type import SERVER_TYPE

from rsdrill.sandbox.config import MemberSpec, member_dir
from rsdrill.sandbox.groundtruth import read_events
from tests.harness.members import (
    member_state,
    ops_in_progress,
    wait_until,
    wire_command,
    writable_primary,
)


def _config(host: str) -> dict[str, Any]:
    return wire_command(host, {"replSetGetConfig": 1, "$db": "admin"})["config"]


def _reconfig(host: str, config: dict[str, Any], **options: Any) -> dict[str, Any]:
    return wire_command(host, {"replSetReconfig": config, **options, "$db": "admin"}, timeout=30)


def _hello(host: str) -> dict[str, Any]:
    return wire_command(host, {"hello": 1, "$db": "admin"})


def _primary(sandbox: Any) -> MemberSpec:
    primary = wait_until(lambda: writable_primary(sandbox), 20, "a writable primary")
    assert isinstance(primary, MemberSpec)
    return primary


def test_a_safe_reconfig_reaches_every_member_and_the_drivers_view(replset, client_for) -> None:
    sandbox = replset("rs3", zones=["east", "east", "west"])
    primary = _primary(sandbox)
    client = client_for(sandbox)
    client.db.c.insert_one({"_id": 1})
    config = _config(primary.host)
    assert config["version"] == 1 and config["term"] >= 1  # a new primary writes its term in
    tagged = config["members"][2]["host"]
    config["version"] += 1
    config["members"][2]["tags"] = {"zone": "west", "rack": "r9"}
    assert _reconfig(primary.host, config)["ok"] == 1.0
    # It returns once a majority has it; every member has it a heartbeat later.
    for m in sandbox.spec.members:
        wait_until(lambda m=m: _config(m.host)["version"] == 2, 10, f"version 2 on {m.host}")
        assert _config(m.host)["members"][2]["tags"] == {"zone": "west", "rack": "r9"}
    # pymongo's own view: the primary's setVersion, and a read by the new tag.
    wait_until(
        lambda: any(
            s.set_version == 2 and s.server_type == SERVER_TYPE.RSPrimary
            for s in client.topology_description.server_descriptions().values()
        ),
        10,
        "pymongo to see setVersion 2",
    )
    by_rack = client.db.get_collection("c", read_preference=Nearest([{"rack": "r9"}]))
    served = client_for(tagged, directConnection=True, readPreference="secondaryPreferred")
    wait_until(lambda: served.db.c.find_one({"_id": 1}) is not None, 10, "the write replicated")
    assert by_rack.find_one({"_id": 1}) == {"_id": 1}
    # A member keeps the config it installed across a restart (local.system.replset).
    secondary = next(m for m in sandbox.spec.members if m.host != primary.host)
    sandbox.kill(secondary)
    sandbox.start(secondary)
    assert _config(secondary.host)["version"] == 2


def _refused(host: str, config: dict[str, Any], code: int, **options: Any) -> None:
    reply = _reconfig(host, config, **options)
    assert (reply["ok"], reply.get("code")) == (0.0, code), reply


def test_the_reconfigs_mongod_refuses_are_refused_and_change_nothing(replset) -> None:
    sandbox = replset("rs3")
    primary = _primary(sandbox)
    secondary = next(m for m in sandbox.spec.members if m.host != primary.host)
    base = _config(primary.host)
    base["version"] += 1

    def edited(change: Any) -> dict[str, Any]:
        config = copy.deepcopy(base)
        change(config)
        return config

    _refused(secondary.host, base, 10107)  # not the primary, not forced
    _refused(primary.host, edited(lambda c: c.update(version=1)), 103)  # not newer
    _refused(primary.host, edited(lambda c: c.update(_id="other")), 103)  # another set
    _refused(primary.host, edited(lambda c: c.update(members=c["members"][:1])), 103)  # 2 voters
    _refused(primary.host, edited(lambda c: c["members"][1].update(_id=0)), 93)  # same _id
    _refused(primary.host, edited(lambda c: c["members"][1].update(hidden=True)), 93)
    _refused(primary.host, edited(lambda c: c["members"][1].update(votes=0)), 93)  # priority 1
    lacking_me = edited(lambda c: c.update(
        members=[m for m in c["members"] if m["host"] != secondary.host]))  # fmt: skip
    _refused(secondary.host, lacking_me, 74, force=True)  # forced, yet not naming this member
    for m in sandbox.spec.members:
        assert _config(m.host)["version"] == 1, m.host


def test_a_lost_majority_comes_back_only_by_a_forced_reconfig_and_the_lost_writes_roll_back(
    replset, client_for
) -> None:
    # Two data centres, 2+1: east holds the majority of the votes.
    sandbox = replset("rs3", zones=["east", "east", "west"])
    east = [m for m in sandbox.spec.members if m.zone == "east"]
    [west] = [m for m in sandbox.spec.members if m.zone == "west"]
    client = client_for(sandbox)
    safe = client.db.get_collection("c", write_concern=WriteConcern(w="majority"))
    safe_ids = [f"safe-{i}" for i in range(10)]
    safe.insert_many([{"_id": i} for i in safe_ids])
    sandbox.stop(west)  # west falls behind (and, were it primary, east takes over)
    primary = wait_until(
        lambda: (p := writable_primary(sandbox)) and p.zone == "east" and p, 20, "an east primary"
    )
    # No fetch of west's may be waiting on the primary: it would carry the next writes into
    # west's socket buffer, to be applied when it thaws.
    wait_until(lambda: not ops_in_progress(primary.host, rsdrillGetOplog=1, **{"from": west.host}),
               5, "west's fetch to end")  # fmt: skip
    lost = [{"_id": f"lost-{i}"} for i in range(5)]
    on_east = client_for(primary.host).db.get_collection("c", write_concern=WriteConcern(j=True))
    on_east.insert_many(lost)  # acknowledged at w:1 by the old primary: only east has them
    for m in east:
        sandbox.kill(m)
    sandbox.cont(west)
    # MongoDB's rule: no primary without a majority of the votes, however long we wait.
    deadline = time.monotonic() + 3  # three election timeouts
    while time.monotonic() < deadline:
        assert member_state(west.host) == "SECONDARY"
        time.sleep(0.05)
    config = _config(west.host)
    config["members"] = [m for m in config["members"] if m["host"] == west.host]
    assert _reconfig(west.host, config, force=True)["ok"] == 1.0
    forced = _config(west.host)
    assert forced["version"] >= 1 + 10_000 and forced["term"] == -1  # as mongod: a jump
    wait_until(lambda: member_state(west.host) == "PRIMARY", 10, "west elected alone")
    after_ids = [f"after-{i}" for i in range(5)]
    safe.insert_many([{"_id": i} for i in after_ids])  # pymongo finds the new primary
    for m in east:
        sandbox.start(m)
    # Back, they learn the newer config from west's heartbeats and find themselves removed.
    for m in east:
        wait_until(lambda m=m: "info" in _hello(m.host), 10, f"{m.host} removed")
        assert _hello(m.host)["info"] == "Does not have a valid replica set config"
    states = {s.name: s.state for s in sandbox.status()}
    assert states == {east[0].host: "REMOVED", east[1].host: "REMOVED", west.host: "PRIMARY"}
    # pymongo takes the primary's member list as the set's (SDAM): the others are dropped.
    wait_until(
        lambda: (
            [f"{h}:{p}" for h, p in client.topology_description.server_descriptions()]
            == [west.host]
        ),
        10,
        "pymongo to drop the removed members",
    )
    # MongoDB's procedure: add each back without a vote, then give it its vote once it is a
    # secondary, one voter at a time.
    config = _config(west.host)
    config["version"] += 1
    config["members"].append({"_id": east[0].id, "host": east[0].host, "votes": 0,
                              "priority": 0, "tags": {"zone": "east"}})  # fmt: skip
    assert _reconfig(west.host, config)["ok"] == 1.0
    direct = client_for(east[0].host, directConnection=True, readPreference="secondaryPreferred")
    wait_until(
        lambda: (
            member_state(east[0].host) == "SECONDARY"
            and sorted(d["_id"] for d in direct.db.c.find()) == sorted(safe_ids + after_ids)
        ),
        30,
        "east0 a secondary holding west's data",
    )
    files = list((member_dir(sandbox.directory, east[0]) / "data" / "rollback").rglob("*.bson"))
    assert [d["_id"] for f in files for d in bson.decode_all(f.read_bytes())] == [
        d["_id"] for d in lost
    ]
    config = _config(west.host)
    config["version"] += 1
    config["members"][-1].update(votes=1, priority=1)
    assert _reconfig(west.host, config)["ok"] == 1.0
    assert "info" in _hello(east[1].host)  # still removed: not added back
    events = read_events(member_dir(sandbox.directory, east[0]) / "events.jsonl")
    states = [e["state"] for e in events if e["event"] == "state"]
    assert "REMOVED" in states and "ROLLBACK" in states[states.index("REMOVED") :]
