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
import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from bson.timestamp import Timestamp

from rsdrill_emulator.errors import CommandError
from rsdrill_emulator.router.catalog import MAJORITY, drain
from rsdrill_emulator.router.router import Router
from rsdrill_emulator.router.routing import Chunk, CollectionRoute
from rsdrill_emulator.shardkey import document_key, in_range

_log = logging.getLogger(__name__)

_CATCH_UP_ROUNDS = 5
ABORT_WAIT_S = 30.0
PING_INTERVAL_S = 1.0
WRITE_BATCH = 64
"""Statements per write command a migration sends (mongod's internalInsertMaxBatchSize: what
it writes in one storage transaction). A member of the sandbox runs one command at a time;
mongod serves its other clients beside a migration's writes, and so a member does between
these commands (one command of a chunk's 500 upserts held a member ~100 ms)."""
HANG_STEPS = tuple(f"moveChunkHangAtStep{i}" for i in range(1, 7))
"""Fail points that hold a migration: 1 locked, 2 cloned, 3 caught up, 4 in the critical
section and caught up, 5 committed, 6 the donor's range deleted (MongoDB's donor has its own
steps of these names)."""
# A migration aborted or left undecided: OperationFailed (a driver takes a NotPrimary-class
# code from a router for the router's own state, and would drop its connections).
MIGRATION_FAILED = 96


class LeftToRecovery(CommandError):
    """Neither decided nor finished here (the config servers did not say whether the commit
    was recorded, or the steps after it kept failing): the migration's record stays for the
    routers' recovery (recover_migrations)."""

    def __init__(self, ns: str, why: str) -> None:
        super().__init__(MIGRATION_FAILED, f"the migration of {ns} is left to the routers' "
                         f"recovery: {why}")  # fmt: skip


@dataclass
class Migration:
    router: Router
    route: CollectionRoute
    chunk: Chunk
    recipient: str
    # The donor's oplog position the catch-up reads after.
    position: Timestamp = field(default_factory=lambda: Timestamp(0, 0))
    # _id of every document copied, or sent to be copied, to the recipient (what an abort
    # deletes there).
    copied: list[Any] = field(default_factory=list)
    # Another router took the migration over (its pings went unrecorded too long).
    taken_over: bool = False
    # Each shard's primary when the migration first reached it: a later one aborts it, as a
    # donor's or recipient's stepdown aborts MongoDB's (a clone read from a primary that then
    # lost its place may hold writes its set rolled back).
    primaries: dict[str, str] = field(default_factory=dict)
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

    def _same_primary(self, shard: str, host: str) -> None:
        first = self.primaries.setdefault(shard, host)
        if first != host:
            raise CommandError(MIGRATION_FAILED,
                               f"migration of {self.ns}: {shard}'s primary changed ({first} -> "
                               f"{host}): aborted")  # fmt: skip

    async def _on(
        self, shard: str, db: str, cmd: dict[str, Any], *, same_primary: bool = True
    ) -> dict[str, Any]:
        host, reply = await self.router.shard(shard).on_primary(db, cmd, retry=False)
        if same_primary:
            self._same_primary(shard, host)
        if not reply.get("ok") or reply.get("writeErrors") or reply.get("writeConcernError"):
            raise CommandError(
                int(reply.get("code") or 1), f"migration of {self.ns} on {shard}: {reply}"
            )
        return reply

    async def _write(
        self,
        shard: str,
        verb: str,
        statements: list[dict[str, Any]],
        *,
        same_primary: bool = True,
    ) -> None:
        """`update` or `delete` (`verb`) `statements` on `shard`, WRITE_BATCH at a time, each
        batch w:majority."""
        db, coll = self._db_coll()
        field_name = {"update": "updates", "delete": "deletes"}[verb]
        for i in range(0, len(statements), WRITE_BATCH):
            batch = statements[i : i + WRITE_BATCH]
            await self._on(shard, db, {verb: coll, field_name: batch, "writeConcern": MAJORITY},
                           same_primary=same_primary)  # fmt: skip

    # -- phases ------------------------------------------------------------------------------

    async def same_primaries(self) -> None:
        """Whether the donor and the recipient are on the primaries the migration began with
        (their first answer here records them)."""
        for shard in (self.donor, self.recipient):
            await self._on(shard, "admin", {"ping": 1})

    async def clone(self) -> None:
        """Every document of the range, from the donor's primary to the recipient's."""
        await self.same_primaries()
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
        self._same_primary(self.donor, host)
        docs = [
            d
            for d in await drain(self.router.shard(self.donor), host, db, reply)
            if self._in_chunk(d)
        ]
        await self._put(docs)

    async def _put(self, docs: list[dict[str, Any]]) -> None:
        if not docs:
            return
        updates = [{"q": {"_id": d["_id"]}, "u": d, "upsert": True} for d in docs]
        # Counted as copied before the write: a batch a new primary of the recipient took
        # aborts the migration only once written (the primary is compared on the answer), and
        # the abort deletes what is counted here (else that batch stayed on the recipient).
        self.copied += [d["_id"] for d in docs if d["_id"] not in self.copied]
        await self._write(self.recipient, "update", updates)

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
        await self._write(self.recipient, "delete", [{"q": {"_id": i}, "limit": 1} for i in gone])
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
        await self._on(self.donor, "config", self._cache_update(on))

    def _cache_update(self, on: bool) -> dict[str, Any]:
        cached = self.route.cache_document(self.donor)
        if on:
            cached["criticalSection"] = True
        return {"update": "cache.collections",
                "updates": [{"q": {"_id": self.ns}, "u": cached, "upsert": True}],
                "writeConcern": MAJORITY}  # fmt: skip

    async def commit(self) -> CollectionRoute:
        """The chunk's new shard and version on the config servers (w:majority), and, if the
        donor keeps chunks, one of them bumped too (MongoDB's control chunk). A write whose
        outcome is unknown (the config primary lost) is retried, as the donor retries its
        commit, until the config servers say the chunk is the recipient's; LeftToRecovery when
        they say nothing for ABORT_WAIT_S: then nobody may abort it but a recovery that reads
        the decision (recover_migrations)."""
        catalog = self.router.catalog
        await self.same_primaries()
        if self.taken_over or not await catalog.ping_migration(self.ns, self.router.host):
            raise CommandError(MIGRATION_FAILED, f"the migration of "
                               f"{self.ns} was taken over by another router")  # fmt: skip
        major = self.route.version.time + 1
        deadline = time.monotonic() + ABORT_WAIT_S
        while True:
            try:
                moved_at, control_at = Timestamp(major, 0), Timestamp(major, 1)
                await catalog.move_chunk_record(self.route, self.chunk, self.recipient,
                                                moved_at, control_at)  # fmt: skip
                moved = (await catalog.refresh()).collections.get(self.ns)
            except CommandError as exc:
                if time.monotonic() > deadline:
                    raise LeftToRecovery(self.ns, f"its commit is not known ({exc})") from exc
                await asyncio.sleep(0.5)
                continue
            if moved is None:  # dropped meanwhile: nothing left to move
                raise CommandError(MIGRATION_FAILED, f"{self.ns} was dropped during its migration")
            if moved.owner(self.chunk.min) == self.recipient:
                return moved
            if time.monotonic() > deadline:  # written, yet not read back: never abort blindly
                raise LeftToRecovery(self.ns, "its commit was not read back")
            await asyncio.sleep(0.5)

    async def ids_in_range(self, shard: str) -> list[Any]:
        """The _id of every document in the chunk's range on `shard` (orphans included)."""
        db, coll = self._db_coll()
        host, reply = await self.router.shard(shard).on_primary(
            db, {"find": coll, "filter": {}, "batchSize": 100_000}, retry=True
        )
        docs = await drain(self.router.shard(shard), host, db, reply)
        return [d["_id"] for d in docs if self._in_chunk(d)]

    async def delete_range(self) -> None:
        """The range's documents on the donor, now orphans there."""
        ids = await self.ids_in_range(self.donor)
        deletes = [{"q": {"_id": i}, "limit": 1} for i in ids]
        # After the commit: on whichever primary the donor has.
        await self._write(self.donor, "delete", deletes, same_primary=False)

    async def abort(self) -> None:
        """Before the commit: the donor's record restored, the recipient's copies deleted
        (on whichever primaries the sets have now)."""
        await self._on(self.donor, "config", self._cache_update(on=False), same_primary=False)
        deletes = [{"q": {"_id": i}, "limit": 1} for i in self.copied]
        await self._write(self.recipient, "delete", deletes, same_primary=False)


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
    committed = undecided = False
    pinging = asyncio.create_task(_ping(migration))
    try:
        await router.hang_at(HANG_STEPS[0])
        await migration.clone()
        await router.hang_at(HANG_STEPS[1])
        for _ in range(_CATCH_UP_ROUNDS):
            if await migration.catch_up() == 0:
                break
        await router.hang_at(HANG_STEPS[2])
        await migration.critical_section(on=True)
        await migration.catch_up()
        await router.hang_at(HANG_STEPS[3])
        moved = await migration.commit()
        committed = True
        await router.hang_at(HANG_STEPS[4])
        await _forward(migration, moved)
        await router.hang_at(HANG_STEPS[5])
    except LeftToRecovery:
        undecided = True  # its record stays, unpinged: recover_migrations reads the decision
        raise
    except BaseException as exc:
        if committed:  # only forward from here: its record stays for the recovery
            undecided = True
            raise
        _log.info("migration of %s to %s: aborted (%s)", ns, recipient, exc)
        await _abort(migration)
        if isinstance(exc, CommandError):
            # A shard's NotPrimary error, passed on, would make a driver drop the router.
            raise CommandError(MIGRATION_FAILED, f"moveChunk of {ns} aborted: {exc}") from exc
        raise
    finally:
        pinging.cancel()
        if not undecided:
            await router.catalog.unlock_migration(ns)
    return {"millis": int((time.monotonic() - started) * 1000)}


async def _forward(migration: Migration, moved: CollectionRoute) -> None:
    """After the commit, only forward: every shard's record of the new version (ending the
    donor's critical section) and the donor's range deleted, again while a set elects, for
    ABORT_WAIT_S; then LeftToRecovery leaves the rest to the routers' recovery."""
    deadline = time.monotonic() + ABORT_WAIT_S
    while True:
        try:
            await record_on_shards(migration.router, migration.ns, moved)
            await migration.delete_range()
            return
        except CommandError as exc:
            if time.monotonic() > deadline:
                raise LeftToRecovery(migration.ns, f"committed, not finished ({exc})") from exc
            await asyncio.sleep(0.5)


async def _ping(migration: Migration) -> None:
    """Say this router still runs the migration (see `Router.abandoned_after_s`)."""
    catalog, host = migration.router.catalog, migration.router.host
    while True:
        with contextlib.suppress(CommandError):
            if not await catalog.ping_migration(migration.ns, host):
                migration.taken_over = True
        await asyncio.sleep(PING_INTERVAL_S)


async def recovery_loop(router: Router) -> None:
    """Look for abandoned migrations every PING_INTERVAL_S (see recover_migrations)."""
    while True:
        with contextlib.suppress(CommandError):  # the config servers are away: next time
            await recover_migrations(router)
        await asyncio.sleep(PING_INTERVAL_S)


async def recover_migrations(router: Router) -> list[str]:
    """Take over every migration whose router stopped pinging (it died, or lost the config
    servers for `Router.abandoned_after_s`): finish one the config servers committed (every
    shard's record of the new version, the donor's range deleted), abort any other (the
    donor's record restored, ending its critical section; every copy in the range deleted on
    the recipient, where the range is not owned). Returns the namespaces recovered."""
    recovered = []
    for doc in await router.catalog.abandoned_migrations(router.abandoned_after_s):
        ns = str(doc["_id"])
        if not await router.catalog.take_over_migration(doc, router.host):
            continue  # another router took it first
        route = (await router.catalog.refresh()).collections.get(ns)
        _log.info("took over the migration of %s from router %s", ns, doc.get("router"))
        if route is not None:
            await _finish_or_abort(router, route, doc)
        await router.catalog.unlock_migration(ns)
        recovered.append(ns)
    return recovered


async def _finish_or_abort(router: Router, route: CollectionRoute, doc: dict[str, Any]) -> None:
    chunk = Chunk(dict(doc["min"]), dict(doc["max"]), str(doc["donor"]), Timestamp(0, 0))
    migration = Migration(router, route, chunk, str(doc["recipient"]))
    if route.owner(chunk.min) == migration.recipient:
        await record_on_shards(router, route.ns, route)
        await migration.delete_range()
        return
    migration.copied = await migration.ids_in_range(migration.recipient)
    await _abort(migration)


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
        # By _id, the whole document: the same again on the next primary changes nothing.
        _, reply = await router.send(shard, "config", {**write, "writeConcern": MAJORITY},
                                     idempotent=True)  # fmt: skip
        if not reply.get("ok") or reply.get("writeErrors") or reply.get("writeConcernError"):
            raise CommandError(int(reply.get("code") or 1),
                               f"recording {ns} on {shard}: {reply}")  # fmt: skip
