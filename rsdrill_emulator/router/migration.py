"""A chunk migration, in MongoDB's phases: the range cloned from the donor shard's primary to the
recipient's, the writes made meanwhile caught up from the donor's oplog, the donor's critical
section (versioned commands on the collection answer StaleConfig until it ends, so routers
hold and retry them), a last catch-up, the commit on the config servers (the chunk's shard and
a new major version, w:majority), every shard's own record of the new version, and the range
deleted on the donor.

In MongoDB the donor shard's primary runs the migration; here the router that was asked does,
recorded in `config.migrations` on the config servers so that no second one starts on the
collection. Until the commit, the copies on the recipient are orphans (filtered out of every
router's reads and writes there) and any failure aborts: the donor's record is restored (its
critical section ends) and the copies are deleted. After the commit the migration only goes
forward.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from bson.timestamp import Timestamp

from rsdrill_emulator.errors import CommandError
from rsdrill_emulator.router.catalog import MAJORITY, drain
from rsdrill_emulator.router.router import Router
from rsdrill_emulator.router.routing import Chunk, CollectionRoute
from rsdrill_emulator.shardkey import document_key, in_range

_CATCH_UP_ROUNDS = 5
ABORT_WAIT_S = 30.0


@dataclass
class Migration:
    router: Router
    route: CollectionRoute
    chunk: Chunk
    recipient: str
    # The donor's oplog position the catch-up reads after.
    position: Timestamp = field(default_factory=lambda: Timestamp(0, 0))
    # _id of every document copied to the recipient (what an abort deletes there).
    copied: list[Any] = field(default_factory=list)
    phases: dict[str, float] = field(default_factory=dict)

    @property
    def ns(self) -> str:
        return self.route.ns

    @property
    def donor(self) -> str:
        return self.chunk.shard

    def _db_coll(self) -> tuple[str, str]:
        db, _, coll = self.ns.partition(".")
        return db, coll

    def _in_chunk(self, doc: dict[str, Any]) -> bool:
        key = document_key(self.route.key, doc)
        return in_range(self.route.key, key, self.chunk.min, self.chunk.max)

    async def _on(self, shard: str, db: str, cmd: dict[str, Any]) -> dict[str, Any]:
        _, reply = await self.router.shard(shard).on_primary(db, cmd, retry=False)
        if not reply.get("ok") or reply.get("writeErrors") or reply.get("writeConcernError"):
            raise CommandError(
                int(reply.get("code") or 1), f"migration of {self.ns} on {shard}: {reply}"
            )
        return reply

    # -- phases ------------------------------------------------------------------------------

    async def clone(self) -> None:
        """Every document of the range, from the donor's primary to the recipient's."""
        db, coll = self._db_coll()
        newest = await self._on(
            self.donor,
            "local",
            {"find": "oplog.rs", "filter": {}, "sort": {"$natural": -1}, "limit": 1},
        )
        batch = newest["cursor"]["firstBatch"]
        self.position = batch[0]["ts"] if batch else Timestamp(0, 0)
        host, reply = await self.router.shard(self.donor).on_primary(
            db, {"find": coll, "filter": {}, "batchSize": 100_000}, retry=False
        )
        docs = [
            d
            for d in await drain(self.router.shard(self.donor), host, db, reply)
            if self._in_chunk(d)
        ]
        await self._put(docs)

    async def _put(self, docs: list[dict[str, Any]]) -> None:
        if not docs:
            return
        db, coll = self._db_coll()
        updates = [{"q": {"_id": d["_id"]}, "u": d, "upsert": True} for d in docs]
        await self._on(
            self.recipient, db, {"update": coll, "updates": updates, "writeConcern": MAJORITY}
        )
        self.copied += [d["_id"] for d in docs if d["_id"] not in self.copied]

    async def catch_up(self) -> int:
        """The donor's writes to the collection since the last position, applied to the
        recipient by document: each changed _id copied again as the donor has it now, or
        deleted there. Returns how many documents changed."""
        db, coll = self._db_coll()
        # A transaction's writes are inside its applyOps entry.
        filt = {"ts": {"$gt": self.position}, "$or": [{"ns": self.ns}, {"o.applyOps.ns": self.ns}]}
        entries = await self._on(
            self.donor, "local", {"find": "oplog.rs", "filter": filt, "batchSize": 100_000}
        )
        changed = entries["cursor"]["firstBatch"]
        if not changed:
            return 0
        self.position = changed[-1]["ts"]
        ids = list(dict.fromkeys(i for e in changed for i in self._ids_written(e)))
        current = await self._on(
            self.donor, db, {"find": coll, "filter": {"_id": {"$in": ids}}, "batchSize": 100_000}
        )
        now = {d["_id"]: d for d in current["cursor"]["firstBatch"]}
        await self._put([d for d in now.values() if self._in_chunk(d)])
        # Only what was copied there: another chunk's document may have the same _id.
        gone = [i for i in ids if i in self.copied and (i not in now or not self._in_chunk(now[i]))]
        self.copied = [i for i in self.copied if i not in gone]
        if gone:
            deletes = [{"q": {"_id": i}, "limit": 1} for i in gone]
            await self._on(
                self.recipient, db, {"delete": coll, "deletes": deletes, "writeConcern": MAJORITY}
            )
        return len(ids)

    def _ids_written(self, entry: dict[str, Any]) -> list[Any]:
        inner = (entry.get("o") or {}).get("applyOps")
        if isinstance(inner, list):
            return [i for op in inner if op.get("ns") == self.ns for i in self._ids_written(op)]
        found = (entry.get("o2") or entry.get("o") or {}).get("_id")
        return [] if found is None else [found]

    async def critical_section(self, on: bool) -> None:
        """The donor's own record marked (on) or restored (off): while marked, versioned
        commands on the collection answer StaleConfig and routers retry them."""
        cached = self.route.cache_document(self.donor)
        if on:
            cached["criticalSection"] = True
        await self._on(
            self.donor,
            "config",
            {
                "update": "cache.collections",
                "updates": [{"q": {"_id": self.ns}, "u": cached, "upsert": True}],
                "writeConcern": MAJORITY,
            },
        )

    async def commit(self) -> CollectionRoute:
        """The chunk's new shard and version on the config servers (w:majority), and, if the
        donor keeps chunks, one of them bumped too (MongoDB's control chunk)."""
        catalog = self.router.catalog
        major = self.route.version.time + 1
        await catalog.move_chunk_record(
            self.route, self.chunk, self.recipient, Timestamp(major, 0), Timestamp(major, 1)
        )
        moved = (await catalog.refresh()).collections.get(self.ns)
        if moved is None or moved.owner(self.chunk.min) != self.recipient:
            raise CommandError(1, f"the commit of {self.ns}'s chunk was not recorded")
        return moved

    async def delete_range(self) -> None:
        """The range's documents on the donor, now orphans there."""
        db, coll = self._db_coll()
        host, reply = await self.router.shard(self.donor).on_primary(
            db, {"find": coll, "filter": {}, "batchSize": 100_000}, retry=True
        )
        docs = await drain(self.router.shard(self.donor), host, db, reply)
        ids = [d["_id"] for d in docs if self._in_chunk(d)]
        if ids:
            await self._on(
                self.donor,
                db,
                {
                    "delete": coll,
                    "deletes": [{"q": {"_id": i}, "limit": 1} for i in ids],
                    "writeConcern": MAJORITY,
                },
            )

    async def abort(self) -> None:
        """Before the commit: the donor's record restored, the recipient's copies deleted."""
        db, coll = self._db_coll()
        await self.critical_section(on=False)
        if self.copied:
            deletes = [{"q": {"_id": i}, "limit": 1} for i in self.copied]
            await self._on(
                self.recipient, db, {"delete": coll, "deletes": deletes, "writeConcern": MAJORITY}
            )


async def move_chunk(
    router: Router, ns: str, key: dict[str, Any], recipient: str
) -> dict[str, Any]:
    """Move the chunk holding shard key value `key` of `ns` to shard `recipient`."""
    route = (await router.catalog.refresh()).collections.get(ns)
    if route is None:
        raise CommandError(61, f"{ns} is not sharded")
    router.shard(recipient)
    chunk = next(c for c in route.chunks if in_range(route.key, key, c.min, c.max))
    if chunk.shard == recipient:
        return {"millis": 0}
    await router.catalog.lock_migration(ns, chunk, recipient, router.host)
    migration = Migration(router, route, chunk, recipient)
    started = time.monotonic()
    committed = False
    try:
        await migration.clone()
        for _ in range(_CATCH_UP_ROUNDS):
            if await migration.catch_up() == 0:
                break
        await migration.critical_section(on=True)
        await migration.catch_up()
        moved = await migration.commit()
        committed = True
        await record_on_shards(router, ns, moved)
        await migration.delete_range()
    except BaseException:
        if not committed:
            await _abort(migration)
        raise
    finally:
        await router.catalog.unlock_migration(ns)
    return {"millis": int((time.monotonic() - started) * 1000)}


async def _abort(migration: Migration) -> None:
    """Abort, again for as long as ABORT_WAIT_S while a set is electing a primary: the donor
    must not be left in its critical section (its writes would stall)."""
    deadline = time.monotonic() + ABORT_WAIT_S
    while True:
        try:
            await migration.abort()
            return
        except CommandError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


async def record_on_shards(router: Router, ns: str, route: CollectionRoute | None) -> None:
    """Every shard's own record of the collection's version and its ranges there
    (`config.cache.collections`; None: unsharded now), w:majority, so a router still routing
    by the older table meets StaleConfig on any of them (commands/shardversion.py)."""
    for shard in router.shards:
        cached = route.cache_document(shard) if route is not None else None
        if cached is None:
            write = {"delete": "cache.collections", "deletes": [{"q": {"_id": ns}, "limit": 0}]}
        else:
            write = {"update": "cache.collections",
                     "updates": [{"q": {"_id": ns}, "u": cached, "upsert": True}]}  # fmt: skip
        _, reply = await router.send(shard, "config", {**write, "writeConcern": MAJORITY})
        if not reply.get("ok") or reply.get("writeErrors") or reply.get("writeConcernError"):
            raise CommandError(int(reply.get("code") or 1),
                               f"recording {ns} on {shard}: {reply}")  # fmt: skip
