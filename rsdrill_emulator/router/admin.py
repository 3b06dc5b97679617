"""The router's own commands (hello as mongos answers it, the sharding commands, the balancer's
switch) and the commands it sends to a database's or a collection's shards: collection and
index definitions, database listing, the end of a transaction."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from bson.int64 import Int64

from rsdrill_emulator import wallclock
from rsdrill_emulator.commands.base import CURRENT, GIT_VERSION
from rsdrill_emulator.errors import CommandError
from rsdrill_emulator.failpoint import AFTER_CURSOR_CHECKOUT, FailPoint
from rsdrill_emulator.request import Request
from rsdrill_emulator.router.balancer import LEASE
from rsdrill_emulator.router.catalog import MAJORITY
from rsdrill_emulator.router.migration import HANG_STEPS, move_chunk, record_on_shards
from rsdrill_emulator.router.router import Router, command, transaction_key
from rsdrill_emulator.shardkey import compare_keys, document_key, in_range

_NAMESPACE_EXISTS = 48
_NAMESPACE_NOT_FOUND = 26


@command("hello", "isMaster", "ismaster")
async def _hello(router: Router, req: Request) -> dict[str, Any]:
    tv, max_await = req.body.get("topologyVersion"), req.body.get("maxAwaitTimeMS")
    if (tv is None) != (max_await is None):
        raise CommandError(51760, "hello needs both or neither of topologyVersion and "
                                  "maxAwaitTimeMS")  # fmt: skip
    if tv is not None and max_await is not None and tv.get("processId") == router.process_id:
        # A router's topology does not change while it runs: an awaitable hello waits it out.
        await asyncio.sleep(int(max_await) / 1000)
    legacy = req.name.lower() == "ismaster"
    reply: dict[str, Any] = {
        "ismaster" if legacy else "isWritablePrimary": True,
        "msg": "isdbgrid",
        "topologyVersion": {"processId": router.process_id, "counter": Int64(0)},
        "maxBsonObjectSize": 16 * 1024 * 1024,
        "maxMessageSizeBytes": 48_000_000,
        "maxWriteBatchSize": 100_000,
        "localTime": wallclock.now(),
        "logicalSessionTimeoutMinutes": 30,
        "connectionId": req.connection_id,
        "minWireVersion": 0,
        "maxWireVersion": CURRENT.max_wire,
        "readOnly": False,
    }
    if req.body.get("helloOk"):
        reply["helloOk"] = True
    return reply


@command("ping")
async def _ping(router: Router, req: Request) -> dict[str, Any]:
    return {}


@command("buildInfo", "buildinfo")
async def _build_info(router: Router, req: Request) -> dict[str, Any]:
    return {"version": CURRENT.version, "gitVersion": GIT_VERSION,
            "versionArray": list(CURRENT.array), "maxBsonObjectSize": 16 * 1024 * 1024,
            "storageEngines": []}  # fmt: skip


_PARAMETERS: dict[str, Any] = {
    "enableTestCommands": True,  # configureFailPoint is there, as test suites expect
    "featureCompatibilityVersion": {"version": CURRENT.version.rsplit(".", 1)[0]},
    "logicalSessionTimeoutMinutes": 30,
}


@command("getParameter", "getparameter")
async def _get_parameter(router: Router, req: Request) -> dict[str, Any]:
    if req.body.get("getParameter") == "*":
        return dict(_PARAMETERS)
    asked = [k for k in _PARAMETERS if k in req.body]
    if not asked:
        raise CommandError(72, "no option found to get")
    return {k: _PARAMETERS[k] for k in asked}


@command("getCmdLineOpts", "getcmdlineopts")
async def _get_cmd_line_opts(router: Router, req: Request) -> dict[str, Any]:
    name, port = router.host.rsplit(":", 1)
    config = ",".join(router.config.hosts)
    config_db = router.config_connection_string
    return {
        "argv": ["mongos", "--bind_ip", name, "--port", port, "--configdb", config],
        "parsed": {"net": {"bindIp": name, "port": int(port)},
                   "sharding": {"configDB": config_db},
                   "setParameter": {"enableTestCommands": "1"}},
    }  # fmt: skip


@command("serverStatus", "serverstatus")
async def _server_status(router: Router, req: Request) -> dict[str, Any]:
    return {"host": router.host, "process": "mongos", "version": CURRENT.version,
            "connections": {"current": router.connections},
            "sharding": {"configsvrConnectionString": router.config_connection_string}}  # fmt: skip


@command("endSessions", "endsessions", "killSessions", "killsessions", "killAllSessions",
         "killallsessions", "refreshSessions", "refreshsessions")  # fmt: skip
async def _sessions(router: Router, req: Request) -> dict[str, Any]:
    for shard in router.shards:
        await router.send(shard, req.db, req.body)
    return {}


@command("configureFailPoint", "configurefailpoint")
async def _configure_fail_point(router: Router, req: Request) -> dict[str, Any]:
    """failCommand on the router itself, and the migration's steps it runs
    (moveChunkHangAtStep1-6, alwaysOn or off); other fail points are a shard member's."""
    if req.db != "admin":
        raise CommandError(13, "configureFailPoint may only be run against the admin database")
    name = str(req.body.get("configureFailPoint"))
    if name in HANG_STEPS:
        entered = router.hang_entries.get(name, 0)
        if req.body.get("mode") == "off":
            router.hang_points.discard(name)
        else:
            router.hang_points.add(name)
        return {"count": entered}
    if name not in ("failCommand", AFTER_CURSOR_CHECKOUT):
        raise CommandError(2, f"fail point {name} is not a router's (a shard member has it)")
    fail_point = FailPoint.from_command(req.body)
    if fail_point is None:
        router.fail_points.pop(name, None)
    else:
        router.fail_points[name] = fail_point
    return {"count": 0}


@command("waitForFailPoint", "waitforfailpoint")
async def _wait_for_fail_point(router: Router, req: Request) -> dict[str, Any]:
    """Until a migration step's fail point was reached `timesEntered` times (maxTimeMS)."""
    name = str(req.body.get("waitForFailPoint"))
    if name not in HANG_STEPS:
        raise CommandError(2, f"waitForFailPoint: {name} is not a router's fail point")
    wanted = int(req.body.get("timesEntered", 1))
    deadline = asyncio.get_running_loop().time() + float(req.body.get("maxTimeMS", 30_000)) / 1000
    while router.hang_entries.get(name, 0) < wanted:
        if asyncio.get_running_loop().time() > deadline:
            raise CommandError(50, f"{name} was not reached {wanted} times in time")
        await asyncio.sleep(0.01)
    return {}


# -- sharding --------------------------------------------------------------------------------


@command("addShard", "addshard")
async def _add_shard(router: Router, req: Request) -> dict[str, Any]:
    name, _, hosts = str(req.body["addShard"]).partition("/")
    if not hosts:
        raise CommandError(2, "addShard takes <set name>/<host:port>,...")
    shard = str(req.body.get("name") or name)
    await router.catalog.add_shard(shard, hosts.split(","))
    # As mongos's addShard: the shard's members learn their name and their config servers
    # (a member asked where its cluster's routers are reads them from there).
    identity = {
        "_id": "shardIdentity",
        "shardName": shard,
        "configsvrConnectionString": router.config_connection_string,
    }
    upsert = {
        "update": "system.version",
        "writeConcern": MAJORITY,
        "updates": [{"q": {"_id": "shardIdentity"}, "u": identity, "upsert": True}],
    }
    _, reply = await router.shard(shard).on_primary("admin", upsert, retry=True)
    if not reply.get("ok") or reply.get("writeErrors"):
        raise CommandError(96, f"addShard: the shard's identity was not written: {reply}")
    return {"shardAdded": shard}


@command("listShards", "listshards")
async def _list_shards(router: Router, req: Request) -> dict[str, Any]:
    table = await router.catalog.refresh()
    return {"shards": [{"_id": name, "host": f"{name}/{','.join(hosts)}", "state": 1}
                       for name, hosts in table.shards.items()]}  # fmt: skip


@command("enableSharding", "enablesharding")
async def _enable_sharding(router: Router, req: Request) -> dict[str, Any]:
    await router.catalog.database_primary(str(req.body[req.name]), create=True)
    return {}


@command("shardCollection", "shardcollection")
async def _shard_collection(router: Router, req: Request) -> dict[str, Any]:
    ns = str(req.body[req.name])
    db, _, coll = ns.partition(".")
    key = dict(req.body.get("key") or {})
    if not db or not coll or not key:
        raise CommandError(2, "shardCollection takes a namespace <db>.<collection> and a key")
    if any(kind not in (1, 1.0, "hashed") for kind in key.values()):
        raise CommandError(2, f'shard key {key}: each field is 1 or "hashed"')
    if list(key.values()).count("hashed") > 1:
        raise CommandError(2, f"shard key {key}: at most one hashed field")
    primary = await router.catalog.database_primary(db, create=True)
    assert primary is not None
    uuid = await _create_with_key_index(router, primary, db, coll, key)
    route = await router.catalog.shard_collection(ns, key, bool(req.body.get("unique")), uuid)
    for shard in route.shards():
        if shard != primary:
            await _create_with_key_index(router, shard, db, coll, key)
    await record_on_shards(router, ns, route)
    return {"collectionsharded": ns}


async def _create_with_key_index(
    router: Router, shard: str, db: str, coll: str, key: dict[str, Any]
) -> Any:
    """The collection on `shard` with an index on the shard key; its uuid there."""
    _, created = await router.send(shard, db, {"create": coll})
    if not created.get("ok") and created.get("code") != _NAMESPACE_EXISTS:
        raise CommandError(int(created.get("code") or 1), str(created.get("errmsg")))
    name = "_".join(f"{f}_{kind}" for f, kind in key.items())
    index = {"createIndexes": coll, "indexes": [{"key": key, "name": name}]}
    _, indexed = await router.send(shard, db, index)
    if not indexed.get("ok"):
        raise CommandError(int(indexed.get("code") or 1), str(indexed.get("errmsg")))
    _, listed = await router.send(shard, db, {"listCollections": 1, "filter": {"name": coll}},
                                  read=True)  # fmt: skip
    found = listed.get("cursor", {}).get("firstBatch", [])
    return found[0].get("info", {}).get("uuid") if found else None


@command("moveChunk", "movechunk", "moveRange", "moverange")
async def _move_chunk(router: Router, req: Request) -> dict[str, Any]:
    """moveChunk (`find`: a document whose key the chunk holds, or `bounds`) and 7.0's
    moveRange (`min`), both to a shard (`to` / `toShard`)."""
    ns = str(req.body[req.name])
    route = (await router.catalog.refresh()).collections.get(ns)
    if route is None:
        raise CommandError(61, f"{ns} is not sharded")
    recipient = str(req.body.get("to") or req.body.get("toShard") or "")
    if "find" in req.body:
        key = document_key(route.key, dict(req.body["find"]))
    elif "bounds" in req.body:
        key = dict(req.body["bounds"][0])
    elif "min" in req.body:
        key = dict(req.body["min"])
    else:
        raise CommandError(2, f"{req.name} takes find, bounds or min")
    return await move_chunk(router, ns, key, recipient)


@command("split")
async def _split(router: Router, req: Request) -> dict[str, Any]:
    """split at `middle` (a shard key value; MongoDB's other forms, `find` for the chunk's
    median and `bounds`, are not there)."""
    ns = str(req.body["split"])
    route = (await router.catalog.refresh()).collections.get(ns)
    if route is None:
        raise CommandError(61, f"{ns} is not sharded")
    if "middle" not in req.body:
        raise CommandError(2, "split takes middle (a shard key value) here")
    middle = document_key(route.key, dict(req.body["middle"]))
    chunk = next(c for c in route.chunks if in_range(route.key, middle, c.min, c.max))
    if compare_keys(route.key, middle, chunk.min) == 0:
        raise CommandError(2, f"cannot split a chunk of {ns} at its lower bound {middle}")
    await router.catalog.split_chunk(route, chunk, middle)
    split = (await router.catalog.refresh()).collections[ns]
    await record_on_shards(router, ns, split)
    return {}


@command("balancerStart", "balancerstart")
async def _balancer_start(router: Router, req: Request) -> dict[str, Any]:
    await router.catalog.set_balancer(stopped=False)
    return {}


@command("balancerStop", "balancerstop")
async def _balancer_stop(router: Router, req: Request) -> dict[str, Any]:
    """Stops the balancer, then waits for a round in progress (a chunk moving, its donor's range
    deleted) to end, for maxTimeMS (60 s by default), as mongod's does."""
    await router.catalog.set_balancer(stopped=True)
    deadline = time.monotonic() + float(req.body.get("maxTimeMS") or 60_000) / 1000
    while await router.catalog.round_in_progress(LEASE):
        if time.monotonic() > deadline:
            raise CommandError(50, "balancerStop: the balancing round in progress did not end "
                                   "within maxTimeMS")  # fmt: skip
        await asyncio.sleep(0.1)
    return {}


@command("configureCollectionBalancing", "configurecollectionbalancing")
async def _configure_balancing(router: Router, req: Request) -> dict[str, Any]:
    """`enableBalancing` of one collection (its other settings, chunk size and auto-merge,
    are not the sandbox's)."""
    ns = str(req.body["configureCollectionBalancing"])
    if ns not in (await router.catalog.refresh()).collections:
        raise CommandError(61, f"{ns} is not sharded")
    if "enableBalancing" in req.body:
        await router.catalog.set_balancing(ns, bool(req.body["enableBalancing"]))
    return {}


@command("balancerStatus", "balancerstatus")
async def _balancer_status(router: Router, req: Request) -> dict[str, Any]:
    stopped = await router.catalog.balancer_stopped()
    return {"mode": "off" if stopped else "full",
            "inBalancerRound": await router.catalog.round_in_progress(LEASE),
            "numBalancerRounds": Int64(0)}  # fmt: skip


@command("flushRouterConfig", "flushrouterconfig")
async def _flush(router: Router, req: Request) -> dict[str, Any]:
    await router.catalog.refresh()
    return {"flushed": True}


# -- definitions, sent to the shards that hold the collection --------------------------------


async def _collection_shards(router: Router, req: Request, *, create: bool) -> list[str]:
    """The database's primary shard, and every shard owning a chunk of a sharded collection."""
    primary = await router.catalog.database_primary(req.db, create=create)
    shards = [primary] if primary is not None else []
    route = router.catalog.table.collections.get(f"{req.db}.{req.body[req.name]}")
    if route is not None:
        shards += [s for s in route.shards() if s not in shards]
    return shards


async def _on_each(router: Router, req: Request, shards: list[str]) -> dict[str, Any]:
    """The command on each shard; the first error, else the first shard's reply."""
    first: dict[str, Any] = {}
    for shard in shards:
        _, reply = await router.send(shard, req.db, req.body)
        if not reply.get("ok") and reply.get("code") != _NAMESPACE_NOT_FOUND:
            return reply
        first = first or reply
    return first


@command("create", "createIndexes", "createindexes", "collMod", "collmod")
async def _define(router: Router, req: Request) -> dict[str, Any]:
    return await _on_each(router, req, await _collection_shards(router, req, create=True))


@command("dropIndexes", "dropindexes", "deleteIndexes", "deleteindexes")
async def _drop_indexes(router: Router, req: Request) -> dict[str, Any]:
    return await _on_each(router, req, await _collection_shards(router, req, create=False))


@command("drop")
async def _drop(router: Router, req: Request) -> dict[str, Any]:
    reply = await _on_each(router, req, await _collection_shards(router, req, create=False))
    ns = f"{req.db}.{req.body['drop']}"
    if ns in router.catalog.table.collections:
        await router.catalog.forget_collection(ns)
        await record_on_shards(router, ns, None)
    return reply or {"ns": f"{req.db}.{req.body['drop']}"}


@command("dropDatabase", "dropdatabase")
async def _drop_database(router: Router, req: Request) -> dict[str, Any]:
    reply = await _on_each(router, req, list(router.shards))
    sharded = [ns for ns in router.catalog.table.collections if ns.partition(".")[0] == req.db]
    await router.catalog.forget_database(req.db)
    for ns in sharded:
        await record_on_shards(router, ns, None)
    return reply


@command("listCollections", "listcollections", "listIndexes", "listindexes")
async def _on_primary_shard(router: Router, req: Request) -> dict[str, Any]:
    primary = await router.catalog.database_primary(req.db, create=False)
    if primary is None:
        if req.name.lower() == "listindexes":
            raise CommandError(_NAMESPACE_NOT_FOUND, f"ns does not exist: {req.db}")
        return router.merged_cursor(f"{req.db}.$cmd.{req.name}", [], None)
    host, reply = await router.send(primary, req.db, req.body, read=True)
    router.remote_cursor(primary, host, req.db, reply)
    return reply


@command("listDatabases", "listdatabases")
async def _list_databases(router: Router, req: Request) -> dict[str, Any]:
    sizes: dict[str, int] = {}
    for shard in router.shards:
        _, reply = await router.send(shard, "admin", req.body, read=True)
        if not reply.get("ok"):
            return reply
        for db in reply.get("databases", []):
            if db["name"] not in ("local", "admin", "config"):
                sizes[db["name"]] = sizes.get(db["name"], 0) + int(db.get("sizeOnDisk", 0))
    databases = [{"name": n, "sizeOnDisk": Int64(s), "empty": s == 0} for n, s in sizes.items()]
    if req.body.get("nameOnly"):
        databases = [{"name": d["name"]} for d in databases]
    return {"databases": databases, "totalSize": Int64(sum(sizes.values()))}


# -- the end of a transaction ----------------------------------------------------------------


@command("commitTransaction", "committransaction", "abortTransaction", "aborttransaction")
async def _end_transaction(router: Router, req: Request) -> dict[str, Any]:
    key = transaction_key(req.body)
    txn = router.transactions.get(key) if key is not None else None
    committing = req.name.lower() == "committransaction"
    recovery = (req.body.get("recoveryToken") or {}).get("recoveryShardId")
    if (txn is None or not txn.participants) and committing and recovery:
        # Another router ran it: as mongos, ask the recovery shard for the decision
        # (coordinateCommitTransaction without participants), never commit from here.
        return (await router.send(recovery, "admin", _handed(req, [])))[1]
    participants = txn.participants if txn is not None and txn.participants else (
        [recovery] if recovery else [])  # fmt: skip
    if not participants:
        if committing:
            return {}  # nothing was read or written: nothing to commit
        raise CommandError(251, "no transaction in progress on this session")
    if committing and len(participants) > 1:
        # Written on several shards: a two-phase commit, handed to the first participant.
        return (await router.send(participants[0], "admin", _handed(req, participants)))[1]
    if committing:
        return (await router.send(participants[0], "admin", req.body))[1]
    sent = await asyncio.gather(*(router.send(shard, "admin", req.body) for shard in participants))
    # As mongos: the first participant's answer, unless another failed otherwise.
    answers = [reply for _, reply in sent]
    failed = [r for r in answers if not r.get("ok") and r.get("code") != 251]
    return failed[0] if failed else answers[0]


def _handed(req: Request, participants: list[str]) -> dict[str, Any]:
    """coordinateCommitTransaction for the client's commit: with the participants, the
    coordinator runs the two-phase commit; without, it gives the decision."""
    fields = {k: v for k, v in req.body.items() if k not in (req.name, "recoveryToken")}
    return {"coordinateCommitTransaction": 1,
            "participants": [{"shardId": s} for s in participants], **fields}  # fmt: skip
