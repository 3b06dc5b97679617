"""The cluster's metadata on the config servers, as a router reads and writes it: shards,
databases (each with its primary shard), sharded collections and their chunks, the balancer's
setting. Every write is w:majority on the config replica set, as MongoDB's sharding catalog
writes are."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import itertools
import uuid
from typing import Any

from bson.binary import Binary, UuidRepresentation
from bson.int64 import Int64
from bson.objectid import ObjectId
from bson.timestamp import Timestamp

from rsdrill_emulator import wallclock
from rsdrill_emulator.errors import CommandError
from rsdrill_emulator.remote_set import ReplicaSet
from rsdrill_emulator.router.routing import Chunk, CollectionRoute, RoutingTable, whole_range

MAJORITY = {"w": "majority", "wtimeout": 15_000}
UPTIME_INTERVAL_S = 10.0
"""How often a router writes its record in config.mongos (mongos's uptime reporter's period)."""
REFRESH_INTERVAL_S = 0.5
"""How often a router reloads the routing table. mongos refreshes when a shard answers
StaleConfig; the emulator's shards do not check versions yet, so routers poll instead."""
_INT64_MAX = 2**63 - 1


def _checked(reply: dict[str, Any], what: str) -> dict[str, Any]:
    if not reply.get("ok"):
        raise CommandError(int(reply.get("code") or 1), f"{what}: {reply.get('errmsg')}")
    wce = reply.get("writeConcernError")
    if wce:
        raise CommandError(int(wce.get("code") or 64), f"{what}: {wce.get('errmsg')}")
    if reply.get("writeErrors"):
        error = reply["writeErrors"][0]
        raise CommandError(int(error.get("code") or 1), f"{what}: {error.get('errmsg')}")
    return reply


class Catalog:
    """The config servers' metadata and the router's cached copy of it (`table`)."""

    def __init__(self, config: ReplicaSet) -> None:
        self.config = config
        self.table = RoutingTable()
        self._lock = asyncio.Lock()

    async def _find(self, coll: str, query: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        find = {"find": coll, "filter": query or {}, "batchSize": 100_000}
        host, reply = await self.config.on_primary("config", find, retry=True)
        return await drain(self.config, host, "config", _checked(reply, f"reading config.{coll}"))

    async def _write(self, cmd: dict[str, Any], what: str) -> dict[str, Any]:
        write = {**cmd, "writeConcern": MAJORITY}
        return _checked((await self.config.on_primary("config", write, retry=False))[1], what)

    async def _upsert(self, coll: str, query: dict[str, Any], update: dict[str, Any],
                      what: str) -> None:  # fmt: skip
        await self._write(
            {"update": coll, "updates": [{"q": query, "u": update, "upsert": True}]}, what
        )

    async def _inserted(self, coll: str, doc: dict[str, Any], what: str) -> bool:
        """Whether `doc` was inserted (False: its _id was there already)."""
        write = {"insert": coll, "documents": [doc], "writeConcern": MAJORITY}
        _, reply = await self.config.on_primary("config", write, retry=False)
        errors = reply.get("writeErrors") or []
        if errors and errors[0].get("code") == 11000:
            return False
        _checked(reply, what)
        return True

    async def _updated_one(self, coll: str, query: dict[str, Any], changes: dict[str, Any],
                           what: str) -> bool:  # fmt: skip
        """Whether a document matched `query` (and was given `changes`)."""
        update = {"q": query, "u": {"$set": changes}}
        reply = await self._write({"update": coll, "updates": [update]}, what)
        return int(reply.get("n", 0)) == 1

    async def _delete(self, coll: str, query: dict[str, Any], what: str) -> None:
        await self._write({"delete": coll, "deletes": [{"q": query, "limit": 0}]}, what)

    async def refresh(self) -> RoutingTable:
        async with self._lock:
            shards, dbs, colls, chunks = [
                await self._find(c) for c in ("shards", "databases", "collections", "chunks")
            ]
            self.table = RoutingTable.from_config(shards, dbs, colls, chunks)
            return self.table

    async def refresh_loop(self) -> None:
        while True:
            with contextlib.suppress(CommandError):  # the config servers are away: keep
                await self.refresh()  # routing by what is cached
            await asyncio.sleep(REFRESH_INTERVAL_S)

    async def uptime_loop(self, host: str, version: str) -> None:
        """The router's record in config.mongos, as mongos keeps it: where a tool finds the
        cluster's routers from a member (the record stays after the router is gone; `ping`
        says when it was last up)."""
        started = asyncio.get_running_loop().time()
        while True:
            up = int(asyncio.get_running_loop().time() - started)
            record = {"ping": _now(), "up": Int64(up), "waiting": True, "mongoVersion": version}
            with contextlib.suppress(CommandError):  # the config servers are away: next time
                await self._upsert("mongos", {"_id": host}, {"$set": record}, "uptime report")
            await asyncio.sleep(UPTIME_INTERVAL_S)

    async def add_shard(self, name: str, hosts: list[str]) -> None:
        doc = {"_id": name, "host": f"{name}/{','.join(hosts)}", "state": 1,
               "topologyTime": _stamp()}  # fmt: skip
        await self._upsert("shards", {"_id": name}, {"$setOnInsert": doc}, "addShard")
        await self.refresh()

    async def database_primary(self, db: str, *, create: bool) -> str | None:
        """The database's primary shard; with `create`, a new database is given the shard
        holding the fewest databases (as mongos picks the one with the least data)."""
        primary = self.table.databases.get(db)
        if primary is not None:
            return primary
        table = await self.refresh()  # another router may have created it meanwhile
        if db in table.databases or not create:
            return table.databases.get(db)
        if not table.shards:
            raise CommandError(70, "the cluster has no shards yet (addShard)")
        held = {s: 0 for s in table.shards}
        for owner in table.databases.values():
            held[owner] = held.get(owner, 0) + 1
        chosen = min(held, key=lambda s: (held[s], s))
        version = {"uuid": _new_uuid(), "timestamp": _stamp(), "lastMod": 1}
        doc = {"_id": db, "primary": chosen, "partitioned": False, "version": version}
        await self._upsert("databases", {"_id": db}, {"$setOnInsert": doc}, f"creating {db}")
        return (await self.refresh()).databases[db]

    async def shard_collection(
        self, ns: str, key: dict[str, Any], unique: bool, uuid_: Any
    ) -> CollectionRoute:
        """Record `ns` as sharded by `key` with its initial chunks: one on the database's
        primary shard for a ranged key, two per shard for a hashed one (MongoDB 7.0's split
        of an empty collection)."""
        db = ns.partition(".")[0]
        primary = await self.database_primary(db, create=True)
        assert primary is not None
        table = await self.refresh()
        existing = table.collections.get(ns)
        if existing is not None:
            if existing.key != key:
                raise CommandError(
                    23, f"{ns} is already sharded with key {existing.key}, not {key}"
                )
            return existing
        epoch, stamp = ObjectId(), _stamp()
        route = CollectionRoute(ns, key, uuid_, unique, epoch, stamp)
        route.chunks = _initial_chunks(key, primary, sorted(table.shards), stamp)
        await self._write({"insert": "chunks", "documents": [
            {"_id": ObjectId(), **c.to_doc(uuid_), "onCurrentShardSince": stamp,
             "history": [{"validAfter": stamp, "shard": c.shard}]} for c in route.chunks]},
            f"writing {ns}'s chunks")  # fmt: skip
        doc = {"_id": ns, "lastmodEpoch": epoch, "lastmod": datetime.datetime.now(datetime.UTC),
               "timestamp": stamp, "uuid": uuid_, "key": key, "unique": unique,
               "noBalance": False}  # fmt: skip
        await self._upsert("collections", {"_id": ns}, doc, f"recording {ns}")
        await self._upsert("databases", {"_id": db}, {"$set": {"partitioned": True}}, db)
        return (await self.refresh()).collections[ns]

    async def forget_collection(self, ns: str) -> None:
        route = self.table.collections.get(ns)
        if route is None:
            return
        await self._delete("chunks", {"uuid": route.uuid}, f"dropping {ns}'s chunks")
        await self._delete("collections", {"_id": ns}, f"dropping {ns}")
        await self.refresh()

    async def forget_database(self, db: str) -> None:
        for ns in [n for n in self.table.collections if n.partition(".")[0] == db]:
            await self.forget_collection(ns)
        await self._delete("databases", {"_id": db}, f"dropping database {db}")
        await self.refresh()

    async def lock_migration(self, ns: str, chunk: Chunk, recipient: str, owner: str) -> None:
        """One migration per collection at a time, as MongoDB's: ConflictingOperationInProgress
        for a second."""
        doc = {"_id": ns, "min": chunk.min, "max": chunk.max, "donor": chunk.shard,
               "recipient": recipient, "router": owner,
               "started": _now(), "ping": _now()}  # fmt: skip
        if not await self._inserted("migrations", doc, f"starting a migration of {ns}"):
            raise CommandError(117, f"a chunk of {ns} is already being moved")

    async def ping_migration(self, ns: str, owner: str) -> bool:
        """Whether `owner` still runs the migration of `ns` (its ping recorded)."""
        query = {"_id": ns, "router": owner}
        return await self._updated_one("migrations", query, {"ping": _now()}, f"pinging {ns}")

    async def abandoned_migrations(self, after_s: float) -> list[dict[str, Any]]:
        """Migrations whose router has not pinged for `after_s`."""
        found = await self._find("migrations")
        limit = _now() - datetime.timedelta(seconds=after_s)
        return [d for d in found if _as_utc(d.get("ping") or d["started"]) < limit]

    async def take_over_migration(self, doc: dict[str, Any], owner: str) -> bool:
        """Whether this router took the migration over (another may have, since `doc`)."""
        query = {"_id": doc["_id"], "router": doc["router"], "ping": doc.get("ping")}
        return await self._updated_one("migrations", query, {"router": owner, "ping": _now()},
                                       "taking over a migration")  # fmt: skip

    async def unlock_migration(self, ns: str) -> None:
        await self._delete("migrations", {"_id": ns}, f"ending the migration of {ns}")

    async def move_chunk_record(self, route: CollectionRoute, chunk: Chunk, recipient: str,
                                moved: Timestamp, control: Timestamp) -> None:  # fmt: skip
        """The commit: the chunk on `recipient` at version `moved`; one chunk the donor keeps
        at `control`."""
        query = {"uuid": route.uuid, "min": chunk.min}
        stamp = _stamp()
        await self._write({"update": "chunks", "updates": [{"q": query, "u": {"$set": {
            "shard": recipient, "lastmod": moved, "onCurrentShardSince": stamp}}}]},
            "committing the migration")  # fmt: skip
        kept = next((c for c in route.chunks if c.shard == chunk.shard and c.min != chunk.min),
                    None)  # fmt: skip
        if kept is not None:
            await self._write({"update": "chunks", "updates": [{"q": {"uuid": route.uuid,
                               "min": kept.min}, "u": {"$set": {"lastmod": control}}}]},
                              "bumping the donor's version")  # fmt: skip

    async def split_chunk(self, route: CollectionRoute, chunk: Chunk,
                          middle: dict[str, Any]) -> None:  # fmt: skip
        """`chunk` becomes [min, middle) and [middle, max) on the same shard, both at a new
        minor version of the collection's (MongoDB's split)."""
        version = route.version
        stamp = _stamp()
        low = Timestamp(version.time, version.inc + 1)
        high = Timestamp(version.time, version.inc + 2)
        upper = Chunk(middle, chunk.max, chunk.shard, high)
        await self._write({"insert": "chunks", "documents": [
            {"_id": ObjectId(), **upper.to_doc(route.uuid), "onCurrentShardSince": stamp,
             "history": [{"validAfter": stamp, "shard": chunk.shard}]}]},
            f"splitting a chunk of {route.ns}")  # fmt: skip
        await self._write({"update": "chunks", "updates": [{"q": {"uuid": route.uuid,
                           "min": chunk.min}, "u": {"$set": {"max": middle, "lastmod": low}}}]},
                          f"splitting a chunk of {route.ns}")  # fmt: skip

    async def take_lease(self, name: str, owner: str, ttl_s: float) -> bool:
        """Whether `owner` holds lease `name` (config.locks) for the next `ttl_s`: taken when
        free or expired, renewed when its own."""
        now = _now()
        until = now + datetime.timedelta(seconds=ttl_s)
        query = {"_id": name, "$or": [{"until": {"$lt": now}}, {"who": owner}]}
        what = f"taking the {name} lease"
        held = {"who": owner, "until": until}
        # Renewed or taken over when expired; else new, unless another router holds it.
        return await self._updated_one("locks", query, held, what) or await self._inserted(
            "locks", {"_id": name, **held}, what
        )

    async def mark_round(self, name: str, owner: str, moving: bool) -> None:
        """Whether `owner`, holding lease `name`, is moving a chunk (`balancerStop` waits for
        that, as mongod's waits for the balancing round in progress)."""
        await self._updated_one("locks", {"_id": name, "who": owner}, {"moving": moving},
                                f"marking the {name} round")  # fmt: skip

    async def round_in_progress(self, name: str) -> bool:
        """Whether lease `name`'s holder is moving a chunk (an expired lease's never is)."""
        found = await self._find("locks", {"_id": name})
        return bool(found and found[0].get("moving") and _as_utc(found[0]["until"]) > _now())

    async def set_balancing(self, ns: str, enabled: bool) -> None:
        """A collection's own balancing (config.collections noBalance)."""
        await self._upsert("collections", {"_id": ns}, {"$set": {"noBalance": not enabled}}, ns)
        await self.refresh()

    async def balancer_stopped(self) -> bool:
        found = await self._find("settings", {"_id": "balancer"})
        return bool(found and found[0].get("stopped"))

    async def set_balancer(self, stopped: bool) -> None:
        update = {"$set": {"stopped": stopped, "mode": "off" if stopped else "full"}}
        await self._upsert("settings", {"_id": "balancer"}, update, "setting the balancer")


def _now() -> datetime.datetime:
    # BSON dates hold milliseconds: a ping read back must equal the one written.
    now = datetime.datetime.now(datetime.UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def _as_utc(moment: datetime.datetime) -> datetime.datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.UTC)


_stamps = itertools.count(1)


def _stamp() -> Timestamp:
    """A timestamp of now, each distinct (metadata versions and topology times)."""
    return Timestamp(int(wallclock.time_s()), next(_stamps) % 2**31)


async def drain(
    where: ReplicaSet, host: str, db: str, reply: dict[str, Any]
) -> list[dict[str, Any]]:
    """Every document of a cursor reply, its getMores run on the member that holds it."""
    cursor = reply["cursor"]
    docs = list(cursor["firstBatch"])
    collection = str(cursor.get("ns", "")).partition(".")[2]
    while cursor.get("id"):
        more = {"getMore": cursor["id"], "collection": collection, "batchSize": 100_000}
        answer = await where.run_on(host, db, more)
        cursor = _checked(answer, f"reading {db}.{collection}")["cursor"]
        docs += cursor["nextBatch"]
    return docs


def _new_uuid() -> Binary:
    return Binary.from_uuid(uuid.uuid4(), UuidRepresentation.STANDARD)


def new_collection_uuid() -> Binary:
    return _new_uuid()


def _initial_chunks(
    key: dict[str, Any], primary: str, shards: list[str], stamp: Timestamp
) -> list[Chunk]:
    low, high = whole_range(key)
    hashed = [f for f, kind in key.items() if kind == "hashed"]
    if not hashed or next(iter(key)) != hashed[0]:
        return [Chunk(low, high, primary, Timestamp(1, 0))]
    field = hashed[0]
    count = 2 * len(shards)
    interval = (_INT64_MAX // count) * 2
    if count % 2 == 0:
        points = [0] + [s * k * interval for k in range(1, count // 2) for s in (-1, 1)]
    else:
        points = [s * (interval // 2 + k * interval) for k in range(count // 2) for s in (-1, 1)]
    points.sort()
    bounds = [low, *({**low, field: Int64(p)} for p in points), high]
    # Others fields of a compound hashed key start at MinKey within each split point.
    return [
        Chunk(bounds[i], bounds[i + 1], shards[i % len(shards)], Timestamp(1, i))
        for i in range(len(bounds) - 1)
    ]
