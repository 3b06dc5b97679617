"""The sharded sandbox through its routers, as pymongo sees it: a Sharded topology of two
routers, databases placed on a primary shard, hashed collections spread over the shards by
MongoDB's own hash, reads merged from every shard, and each shard checked directly (a shard
primary's own count, not the router's word)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from bson.min_key import MinKey
from bson.objectid import ObjectId
from bson.timestamp import Timestamp
from pymongo import ASCENDING, MongoClient
from pymongo.errors import OperationFailure, PyMongoError

from rsdrill.sandbox.config import CONFIG_SET, Settings
from rsdrill.sandbox.sharded import ShardedSandbox, up_sharded

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, free_port_base: Callable[[int], int]
) -> Iterator[ShardedSandbox]:
    directory = tmp_path_factory.mktemp("sharded")
    sandbox = up_sharded(
        directory,
        port_base=free_port_base(3 + 2 * 3 + 2),
        settings=Settings(election_timeout_ms=1000),
        balancer=False,  # chunks stay where the tests put them (test_the_balancer_... starts it)
    )
    try:
        yield sandbox
    finally:
        sandbox.down(grace_s=2.0)
        assert not any(s.running() for s in ShardedSandbox(directory).sets.values())


@pytest.fixture(scope="module")
def client(cluster: ShardedSandbox) -> Iterator[MongoClient[dict[str, Any]]]:
    with MongoClient(cluster.uri, serverSelectionTimeoutMS=20_000) as c:
        yield c


def shard_primary(cluster: ShardedSandbox, name: str) -> MongoClient[dict[str, Any]]:
    sandbox = cluster.sets[name]
    return MongoClient(sandbox.uri, serverSelectionTimeoutMS=20_000)


def test_pymongo_sees_a_sharded_topology_of_both_routers(
    cluster: ShardedSandbox, client: MongoClient[dict[str, Any]]
) -> None:
    client.admin.command("ping")
    client["probe"]["t"].insert_one({"x": 1})
    description = client.topology_description
    assert description.topology_type_name == "Sharded"
    routers = {f"{h}:{p}" for (h, p), s in description.server_descriptions().items()
               if s.server_type_name == "Mongos"}  # fmt: skip
    assert routers == set(cluster.spec.routers)


def test_list_shards_names_every_shard_and_its_members(
    cluster: ShardedSandbox, client: MongoClient[dict[str, Any]]
) -> None:
    shards = client.admin.command("listShards")["shards"]
    assert [s["_id"] for s in shards] == list(cluster.spec.shards)
    for shard in shards:
        hosts = [m.host for m in cluster.sets[shard["_id"]].spec.members]
        assert shard["host"] == f"{shard['_id']}/{','.join(hosts)}"


def test_an_unsharded_collection_lives_on_its_database_s_primary_shard(
    cluster: ShardedSandbox, client: MongoClient[dict[str, Any]]
) -> None:
    client["plain"]["docs"].insert_many([{"_id": i} for i in range(20)])
    primary = client["config"]["databases"].find_one({"_id": "plain"})
    assert primary is not None and primary["primary"] in cluster.spec.shards
    for name in cluster.spec.shards:
        with shard_primary(cluster, name) as direct:
            held = direct["plain"]["docs"].count_documents({})
        assert held == (20 if name == primary["primary"] else 0), name
    assert client["plain"]["docs"].count_documents({}) == 20


def test_a_hashed_collection_spreads_over_the_shards_by_mongodb_s_hash(
    cluster: ShardedSandbox, client: MongoClient[dict[str, Any]]
) -> None:
    client.admin.command("shardCollection", "app.users", key={"uid": "hashed"})
    users = client["app"]["users"]
    users.insert_many([{"uid": i, "n": i} for i in range(200)])
    chunks = list(client["config"]["chunks"].find({}))
    assert len(chunks) == 2 * len(cluster.spec.shards)  # MongoDB 7.0's initial split
    held = {}
    for name in cluster.spec.shards:
        with shard_primary(cluster, name) as direct:
            held[name] = direct["app"]["users"].count_documents({})
    assert sum(held.values()) == 200 and all(held.values()), held
    # Each document on the shard whose chunk holds its key's hash ($toHashedIndexKey, run by
    # the shard itself is not there yet: the chunk bounds decide).
    assert users.count_documents({}) == 200
    assert users.find_one({"uid": 7}, {"_id": 0}) == {"uid": 7, "n": 7}


def test_a_scatter_gather_read_is_sorted_and_limited_across_shards(
    client: MongoClient[dict[str, Any]],
) -> None:
    users = client["app"]["users"]
    if users.count_documents({}) < 200:
        client.admin.command("shardCollection", "app.users", key={"uid": "hashed"})
        users.insert_many([{"uid": i, "n": i} for i in range(200)])
    top = [d["n"] for d in users.find({"n": {"$gte": 50}}).sort("n", ASCENDING).limit(5)]
    assert top == [50, 51, 52, 53, 54]
    everything = [d["n"] for d in users.find({}, batch_size=7).sort("n", -1)]
    assert everything == list(range(199, -1, -1))
    pipeline = [{"$match": {"n": {"$lt": 10}}}, {"$group": {"_id": None, "total": {"$sum": "$n"}}}]
    grouped = list(users.aggregate(pipeline))
    assert grouped[0]["total"] == 45


def test_updates_and_deletes_reach_the_shards_that_hold_the_documents(
    client: MongoClient[dict[str, Any]],
) -> None:
    orders = client["app"]["orders"]
    client.admin.command("shardCollection", "app.orders", key={"oid": "hashed"})
    orders.insert_many([{"oid": i, "state": "new"} for i in range(50)])
    assert orders.update_many({}, {"$set": {"state": "paid"}}).modified_count == 50
    assert orders.update_one({"oid": 3}, {"$set": {"state": "sent"}}).modified_count == 1
    assert orders.delete_one({"state": "paid"}).deleted_count == 1
    assert orders.count_documents({"state": "paid"}) == 48
    assert orders.find_one_and_update({"oid": 3}, {"$set": {"state": "done"}})["state"] == "sent"


def test_a_shard_answers_stale_config_to_a_router_that_takes_a_sharded_collection_for_unsharded(
    cluster: ShardedSandbox, client: MongoClient[dict[str, Any]]
) -> None:
    client.admin.command("shardCollection", "app.versioned", key={"v": "hashed"})
    unsharded = {"e": ObjectId(bytes(12)), "t": Timestamp(0, 0), "v": Timestamp(0, 0)}
    insert = {"insert": "versioned", "documents": [{"v": 1}], "shardVersion": unsharded}
    for name in cluster.spec.shards:
        with shard_primary(cluster, name) as direct:
            with pytest.raises(OperationFailure) as info:
                direct["app"].command(insert)
            # Without a version (a client of the shard itself) nothing is checked, as on mongod.
            direct["app"]["versioned"].insert_one({"v": 2, "direct": True})
        assert info.value.code == 13388, info.value.details
        details = info.value.details or {}
        assert details["ns"] == "app.versioned" and details["shardId"] == name
        assert details["vReceived"] == unsharded and details["vWanted"]["e"] != unsharded["e"]
    # Through a router the insert lands (the routers route it by the table).
    client["app"]["versioned"].insert_one({"v": 1})
    assert client["app"]["versioned"].count_documents({"direct": {"$exists": False}}) == 1


def test_an_orphan_on_a_shard_is_neither_read_nor_written_through_the_routers(
    cluster: ShardedSandbox, client: MongoClient[dict[str, Any]]
) -> None:
    """A document on a shard outside the ranges it owns (what a migration leaves behind, or
    copies before its commit) is filtered out of a router's reads and writes there."""
    client.admin.command("shardCollection", "app.orphans", key={"k": "hashed"})
    orphans = client["app"]["orphans"]
    orphans.insert_many([{"k": i} for i in range(20)])
    stray = _owned_key(client, "app.orphans", "shard1")
    with shard_primary(cluster, "shard0") as direct:
        direct["app"]["orphans"].insert_one({"k": stray, "orphan": True})
        assert orphans.count_documents({}) == 20
        assert orphans.find_one({"orphan": True}) is None
        assert len(list(orphans.find({}))) == 20
        assert orphans.update_many({}, {"$set": {"seen": 1}}).modified_count == 20
        assert direct["app"]["orphans"].find_one({"orphan": True}, {"_id": 0}) == {
            "k": stray, "orphan": True}  # fmt: skip


def _chunks_of(client: MongoClient[dict[str, Any]], ns: str) -> list[dict[str, Any]]:
    uuid = client["config"]["collections"].find_one({"_id": ns})["uuid"]
    return list(client["config"]["chunks"].find({"uuid": uuid}))


def test_a_moved_chunk_takes_its_documents_and_every_router_follows(
    cluster: ShardedSandbox, client: MongoClient[dict[str, Any]]
) -> None:
    client.admin.command("shardCollection", "app.moved", key={"k": "hashed"})
    moved = client["app"]["moved"]
    moved.insert_many([{"k": i} for i in range(100)])
    chunk = next(c for c in _chunks_of(client, "app.moved") if c["shard"] == "shard0")
    before = {}
    for name in cluster.spec.shards:
        with shard_primary(cluster, name) as direct:
            before[name] = direct["app"]["moved"].count_documents({})
    client.admin.command("moveChunk", "app.moved", bounds=[chunk["min"], chunk["max"]],
                         to="shard1")  # fmt: skip
    after_chunk = next(c for c in _chunks_of(client, "app.moved") if c["min"] == chunk["min"])
    assert after_chunk["shard"] == "shard1"
    assert after_chunk["lastmod"].time == chunk["lastmod"].time + 1  # a new major version
    after = {}
    for name in cluster.spec.shards:
        with shard_primary(cluster, name) as direct:
            after[name] = direct["app"]["moved"].count_documents({})
    assert after["shard0"] < before["shard0"] and after["shard1"] > before["shard1"]
    assert sum(after.values()) == 100  # the donor's copies deleted
    # Both routers (one of them stale until a shard says so) find every document once.
    for router in cluster.spec.routers:
        with MongoClient(router, serverSelectionTimeoutMS=20_000) as one:
            keys = sorted(d["k"] for d in one["app"]["moved"].find({}, {"_id": 0}))
            assert keys == list(range(100)), router
            assert all(one["app"]["moved"].find_one({"k": i}) for i in range(0, 100, 7))


def test_a_split_chunk_is_two_at_a_newer_minor_version_that_every_router_follows(
    cluster: ShardedSandbox, client: MongoClient[dict[str, Any]]
) -> None:
    client.admin.command("shardCollection", "app.split", key={"n": 1})
    (whole,) = _chunks_of(client, "app.split")
    client.admin.command("split", "app.split", middle={"n": 50})
    low, high = sorted(_chunks_of(client, "app.split"), key=lambda c: c["max"] == whole["max"])
    assert (low["min"], low["max"], high["min"], high["max"]) == (
        whole["min"], {"n": 50}, {"n": 50}, whole["max"]
    )  # fmt: skip
    assert low["shard"] == high["shard"] == whole["shard"]
    assert (low["lastmod"].time, high["lastmod"].time) == (whole["lastmod"].time,) * 2
    assert whole["lastmod"].inc < low["lastmod"].inc < high["lastmod"].inc
    with pytest.raises(OperationFailure, match="lower bound"):
        client.admin.command("split", "app.split", middle={"n": 50})
    other = next(s for s in cluster.spec.shards if s != whole["shard"])
    client.admin.command("moveChunk", "app.split", find={"n": 50}, to=other)
    # Each router, one of them stale, puts each half's documents on its shard.
    for i, router in enumerate(cluster.spec.routers):
        with MongoClient(router, serverSelectionTimeoutMS=20_000) as one:
            one["app"]["split"].insert_many([{"n": n, "via": i} for n in (10, 90)])
    for name, wanted in ((whole["shard"], [10, 10]), (other, [90, 90])):
        with shard_primary(cluster, name) as direct:
            assert sorted(d["n"] for d in direct["app"]["split"].find()) == wanted, name


def test_the_balancer_evens_out_chunks_but_leaves_a_collection_without_balancing(
    cluster: ShardedSandbox, client: MongoClient[dict[str, Any]]
) -> None:
    for name in ("even", "still"):
        client.admin.command("shardCollection", f"app.{name}", key={"n": 1})
        for middle in (100, 200, 300, 400):
            client.admin.command("split", f"app.{name}", middle={"n": middle})
        client["app"][name].insert_many([{"n": n} for n in range(500)])
    client.admin.command("configureCollectionBalancing", "app.still", enableBalancing=False)
    (home,) = {c["shard"] for c in _chunks_of(client, "app.still")}
    client.admin.command("balancerStart")
    try:
        deadline = time.monotonic() + 60
        while True:
            owners = [c["shard"] for c in _chunks_of(client, "app.even")]
            counts = sorted(owners.count(s) for s in cluster.spec.shards)
            if counts[-1] - counts[0] < 2:  # MongoDB's threshold below 20 chunks
                break
            assert time.monotonic() < deadline, counts
            time.sleep(0.5)
    finally:
        client.admin.command("balancerStop")
    assert client.admin.command("balancerStatus")["mode"] == "off"
    assert {c["shard"] for c in _chunks_of(client, "app.still")} == {home}
    assert sorted(d["n"] for d in client["app"]["even"].find()) == list(range(500))
    for name in cluster.spec.shards:  # each document on the shard owning its chunk only
        with shard_primary(cluster, name) as direct:
            mine = {c["min"]["n"] for c in _chunks_of(client, "app.even") if c["shard"] == name}
            held = {d["n"] // 100 * 100 for d in direct["app"]["even"].find()}
            assert {0 if isinstance(m, MinKey) else m for m in mine} == held, name


def test_balancer_stop_waits_for_the_chunk_moving(
    cluster: ShardedSandbox, client: MongoClient[dict[str, Any]]
) -> None:
    """As mongod's: balancerStop returns once the round in progress has ended (its chunk moved,
    the donor's range deleted), or fails at maxTimeMS; balancerStatus says a round is on."""
    routers = [MongoClient(f"mongodb://{h}/?directConnection=true") for h in cluster.spec.routers]
    step = "moveChunkHangAtStep5"  # committed, the donor's range not deleted yet
    try:
        client.admin.command("shardCollection", "app.waited", key={"n": 1})
        for middle in (100, 200, 300, 400):
            client.admin.command("split", "app.waited", middle={"n": middle})
        client["app"]["waited"].insert_many([{"n": n} for n in range(500)])

        def reached() -> int:  # how often migrations got there (earlier tests' too)
            return sum(r.admin.command("configureFailPoint", step, mode="alwaysOn")["count"]
                       for r in routers)  # fmt: skip

        before = reached()  # the balancer runs on whichever router holds its lease: both hang
        client.admin.command("balancerStart")
        deadline = time.monotonic() + 60
        while reached() == before:
            assert time.monotonic() < deadline, "no migration reached its commit"
            time.sleep(0.2)
        assert client.admin.command("balancerStatus")["inBalancerRound"] is True
        with pytest.raises(OperationFailure) as held:
            client.admin.command("balancerStop", maxTimeMS=500)
        assert held.value.code == 50
        for router in routers:
            router.admin.command("configureFailPoint", step, mode="off")
        client.admin.command("balancerStop")
        status = client.admin.command("balancerStatus")
        assert status["mode"] == "off" and status["inBalancerRound"] is False
        for name in cluster.spec.shards:  # the round's donor range is gone already
            with shard_primary(cluster, name) as direct:
                mine = {c["min"]["n"] for c in _chunks_of(client, "app.waited")
                        if c["shard"] == name}  # fmt: skip
                held_ns = {d["n"] // 100 * 100 for d in direct["app"]["waited"].find()}
                assert {0 if isinstance(m, MinKey) else m for m in mine} == held_ns, name
    finally:
        for router in routers:
            router.admin.command("configureFailPoint", step, mode="off")
            router.close()
        client.admin.command("balancerStop")


def test_writes_during_a_migration_are_neither_lost_nor_duplicated(
    cluster: ShardedSandbox, client: MongoClient[dict[str, Any]]
) -> None:
    """Inserts and updates through both routers all the while a chunk moves: every
    acknowledged insert is there exactly once afterwards, with its last acknowledged update."""
    client.admin.command("shardCollection", "app.busy", key={"k": "hashed"})
    busy = client["app"]["busy"]
    busy.insert_many([{"k": i, "v": 0} for i in range(50)])
    chunk = next(c for c in _chunks_of(client, "app.busy") if c["shard"] == "shard0")
    acknowledged: list[int] = []
    updated: dict[int, int] = {}
    stop = threading.Event()
    counting = threading.Lock()

    failed: list[BaseException] = []

    def write(router: str, first: int) -> None:
        try:
            write_until_stopped(router, first)
        except PyMongoError as exc:  # the test fails on it below
            failed.append(exc)

    def write_until_stopped(router: str, first: int) -> None:
        with MongoClient(router, serverSelectionTimeoutMS=20_000) as own:
            coll = own["app"]["busy"]
            n = first
            while not stop.is_set():
                coll.insert_one({"k": n, "v": 0})
                acknowledged.append(n)
                target = n % 50
                coll.update_one({"k": target}, {"$inc": {"v": 1}})
                with counting:
                    updated[target] = updated.get(target, 0) + 1
                n += 2

    writers = [threading.Thread(target=write, args=(r, 1000 + i))
               for i, r in enumerate(cluster.spec.routers)]  # fmt: skip
    for writer in writers:
        writer.start()
    time.sleep(0.3)
    client.admin.command("moveChunk", "app.busy", bounds=[chunk["min"], chunk["max"]],
                         to="shard1")  # fmt: skip
    time.sleep(0.3)
    stop.set()
    for writer in writers:
        writer.join()
    assert not failed, failed
    found = [d["k"] for d in busy.find({"k": {"$gte": 1000}})]
    assert sorted(found) == sorted(acknowledged)  # none lost, none twice
    values = {d["k"]: d["v"] for d in busy.find({"k": {"$lt": 50}})}
    assert values == {k: updated.get(k, 0) for k in range(50)}


def test_a_causal_read_on_a_shard_behind_another_s_time_is_answered_at_once(
    client: MongoClient[dict[str, Any]],
) -> None:
    """A causally consistent session writes on shard1 a second after shard0's last write, then
    reads on shard0: shard0's primary is behind the session's afterClusterTime and writes a
    no-op past it (as mongod does) instead of waiting for a write that may never come."""
    client.admin.command("shardCollection", "app.causal", key={"k": "hashed"})
    causal = client["app"]["causal"]
    keys = {s: _owned_key(client, "app.causal", s) for s in ("shard0", "shard1")}
    causal.insert_one({"k": keys["shard0"]})
    time.sleep(1.1)  # shard1's next timestamp is in a later second than shard0's last
    with client.start_session(causal_consistency=True) as session:
        causal.insert_one({"k": keys["shard1"]}, session=session)
        started = time.monotonic()
        found = causal.find_one({"k": keys["shard0"]}, session=session)
        took = time.monotonic() - started
    assert found is not None
    assert took < 5.0, took  # a wait for shard0's next write would run to maxTimeMS (10 s)


def test_a_key_pattern_that_mongodb_refuses_is_refused(
    client: MongoClient[dict[str, Any]],
) -> None:
    with pytest.raises(OperationFailure, match="each field is 1 or"):
        client.admin.command("shardCollection", "app.bad", key={"k": -1})


def test_the_config_database_is_read_from_the_config_servers(
    cluster: ShardedSandbox, client: MongoClient[dict[str, Any]]
) -> None:
    via_router = sorted(s["_id"] for s in client["config"]["shards"].find())
    with shard_primary(cluster, CONFIG_SET) as direct:
        on_config = sorted(s["_id"] for s in direct["config"]["shards"].find())
    assert via_router == on_config == sorted(cluster.spec.shards)


def test_a_shard_s_directory_is_a_sandbox_of_its_own(cluster: ShardedSandbox) -> None:
    for name, sandbox in cluster.sets.items():
        assert sandbox.directory == Path(cluster.directory / name)
        assert sandbox.spec.set_name == name
        assert len(sandbox.running()) == 3


def _owned_key(client: MongoClient[dict[str, Any]], ns: str, shard: str) -> int:
    """A value of `k` whose hash falls in a chunk `shard` owns (config.chunks, MongoDB's hash)."""
    from rsdrill_emulator.shardkey import hash64

    uuid = client["config"]["collections"].find_one({"_id": ns})["uuid"]
    chunks = list(client["config"]["chunks"].find({"uuid": uuid, "shard": shard}))

    def owned(h: int) -> bool:
        def above(bound: Any) -> bool:
            return not isinstance(bound, int) or h >= bound

        def below(bound: Any) -> bool:
            return not isinstance(bound, int) or h < bound

        return any(above(c["min"]["k"]) and below(c["max"]["k"]) for c in chunks)

    return next(k for k in range(1000) if owned(hash64(k)))


def test_a_stream_on_a_database_or_the_cluster_merges_every_shard(
    client: MongoClient[dict[str, Any]],
) -> None:
    """Events from both shards in time order; resumed from one, the rest exactly once; a
    dropDatabase invalidates a database's stream once, and only the shard that held the
    database wrote it (a shard without it writes nothing, as mongod)."""
    client.admin.command("shardCollection", "streams.spread", key={"k": 1})
    client.admin.command("split", "streams.spread", middle={"k": 0})
    owners = {c["shard"] for c in client["config"]["chunks"].find({"max": {"k": 0}})}
    other = next(s for s in ("shard0", "shard1") if s not in owners)
    client.admin.command("moveChunk", "streams.spread", find={"k": 0}, to=other)
    db = client["streams"]
    with db.watch(max_await_time_ms=200) as stream, client.watch(max_await_time_ms=200) as whole:
        for k in (-2, 1, -1, 2):  # alternate shards
            db["spread"].insert_one({"k": k})
        db["plain"].insert_one({"k": 9})  # an unsharded collection, on the primary shard
        seen = [stream.next() for _ in range(5)]
        assert [e["fullDocument"]["k"] for e in seen] == [-2, 1, -1, 2, 9]
        assert [e["clusterTime"] for e in seen] == sorted(e["clusterTime"] for e in seen)
        everywhere = [whole.next()["fullDocument"]["k"] for _ in range(5)]
        assert everywhere == [-2, 1, -1, 2, 9]
    with db.watch(resume_after=seen[1]["_id"], max_await_time_ms=200) as resumed:
        assert [resumed.next()["fullDocument"]["k"] for _ in range(3)] == [-1, 2, 9]
    with db.watch(max_await_time_ms=200) as stream:
        client.drop_database("streams")
        kinds = [e["operationType"] for e in stream]  # ends at the invalidate
    assert kinds.count("dropDatabase") == 1 and kinds[-1] == "invalidate", kinds
    assert kinds.count("invalidate") == 1
