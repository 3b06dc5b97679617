"""The router's reads and writes: each sent to the shard that owns what it touches (an
unsharded collection lives on its database's primary shard), or to every shard that owns a
chunk when the filter does not pin the shard key, with the replies merged as mongos merges
them."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bson.int64 import Int64

from rsdrill.sandbox.config import CONFIG_SET
from rsdrill_emulator import wallclock
from rsdrill_emulator.changestream import label_resumable
from rsdrill_emulator.commands.base import _ns
from rsdrill_emulator.commands.shardversion import UNSHARDED
from rsdrill_emulator.errors import CommandError
from rsdrill_emulator.failpoint import AFTER_CURSOR_CHECKOUT
from rsdrill_emulator.peer import PeerError
from rsdrill_emulator.pipeline import run_pipeline
from rsdrill_emulator.projection import sort_documents
from rsdrill_emulator.request import Request
from rsdrill_emulator.router import streams
from rsdrill_emulator.router.catalog import drain
from rsdrill_emulator.router.router import (
    STALE_RETRIES,
    MergedCursor,
    MergedStream,
    RemoteCursor,
    Router,
    StaleRouting,
    command,
)
from rsdrill_emulator.router.routing import CollectionRoute

_CONFIG_SERVER_DATABASES = frozenset({"config", "admin"})
# Stages a shard can run on its own part of the data, leaving the merge a concatenation.
_PER_DOCUMENT_STAGES = frozenset(
    {"$match", "$project", "$addFields", "$set", "$unset", "$replaceRoot", "$replaceWith"}
)


@dataclass(frozen=True)
class Targets:
    """Where a command goes, worked out on one routing table, and that table's shard version
    of the collection, sent with it (None: not versioned, the config servers' databases)."""

    route: CollectionRoute | None
    shards: list[str]
    version: dict[str, Any] | None


async def _targets(
    router: Router, req: Request, query: dict[str, Any] | None, *, create: bool = False
) -> Targets:
    """The collection's route (None: unsharded) and the shards a filter reaches (the
    `config` and `admin` databases live on the config servers)."""
    if req.db in _CONFIG_SERVER_DATABASES:
        return Targets(None, [CONFIG_SET], None)
    route = router.catalog.table.collections.get(_ns(req))
    if route is None:
        primary = await router.catalog.database_primary(req.db, create=create)
        # Finding the database may have reloaded the table: the version sent must be that
        # of the table the targets came from.
        route = router.catalog.table.collections.get(_ns(req))
        if route is None:
            return Targets(None, [primary] if primary is not None else [], UNSHARDED)
    return Targets(route, route.shards_for_filter(query or {}), route.shard_version())


# -- writes ----------------------------------------------------------------------------------


def _merge_write(total: dict[str, Any], reply: dict[str, Any], indexes: list[int]) -> None:
    """Add one shard's write reply to the client's, its statement indexes mapped back."""
    if not reply.get("ok"):
        raise CommandError(int(reply.get("code") or 1), str(reply.get("errmsg")),
                           labels=tuple(reply.get("errorLabels", ())))  # fmt: skip
    for name in ("n", "nModified"):
        if name in reply:
            total[name] = total.get(name, 0) + int(reply[name])
    for error in reply.get("writeErrors", []):
        total.setdefault("writeErrors", []).append({**error, "index": indexes[error["index"]]})
    for upserted in reply.get("upserted", []):
        total.setdefault("upserted", []).append({**upserted, "index": indexes[upserted["index"]]})
    if "writeConcernError" in reply and "writeConcernError" not in total:
        total["writeConcernError"] = reply["writeConcernError"]
    if "recoveryToken" in reply:  # inside a transaction: the driver keeps it for its commit
        total["recoveryToken"] = reply["recoveryToken"]
    for label in reply.get("errorLabels", []):
        if label not in total.setdefault("errorLabels", []):
            total["errorLabels"].append(label)


async def _write_part(
    router: Router, req: Request, key: str, target: tuple[str, Targets], indexes: list[int]
) -> dict[str, Any]:
    """Some of the statements (`indexes`) on one shard of `target`, with their statement ids."""
    shard, targets = target
    statements = req.body[key]
    body = {**req.body, key: [statements[i] for i in indexes]}
    if "txnNumber" in req.body:
        given = req.body.get("stmtIds")
        body["stmtIds"] = [int(given[i]) if given else i for i in indexes]
    return (await router.send(shard, req.db, body, version=targets.version))[1]


async def _owners(router: Router, req: Request, pending: list[int]) -> tuple[list[str], Targets]:
    """The shard each pending insert goes to on the current table: by its document's key, or
    to the database's primary shard for an unsharded collection."""
    targets = await _targets(router, req, None, create=True)
    if targets.route is None:
        return [targets.shards[0]] * len(pending), targets
    return [targets.route.shard_of_document(req.body["documents"][i]) for i in pending], targets


async def _insert_in_order(router: Router, req: Request) -> dict[str, Any]:
    """Documents in order, each run of consecutive ones bound for one shard in one command;
    an ordered insert stops at its first error, as mongos's batch writer does. A run a shard
    finds stale is routed again on a refreshed table, with what follows it."""
    key = "documents"
    ordered = req.body.get("ordered", True)
    total: dict[str, Any] = {"n": 0}
    pending = list(range(len(req.body.get(key, []))))
    stale = 0
    while pending:
        owners, targets = await _owners(router, req, pending)
        run = pending[: next((k for k, o in enumerate(owners) if o != owners[0]), len(owners))]
        try:
            reply = await _write_part(router, req, key, (owners[0], targets), run)
        except StaleRouting:
            stale += 1
            if stale > STALE_RETRIES:
                raise
            await router.refreshed(stale)
            continue
        _merge_write(total, reply, run)
        pending = pending[len(run) :]
        if ordered and total.get("writeErrors"):
            break
    return total


@command("insert")
async def _insert(router: Router, req: Request) -> dict[str, Any]:
    return await _insert_in_order(router, req)


async def _by_statement(
    router: Router, req: Request, key: str, single: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    """update / delete: on an unsharded collection as one command; on a sharded one, each
    statement on the shards its filter reaches (a single-document one that reaches several is
    tried on each in turn until one matches), again on the shards not yet done when one finds
    the router stale."""
    total = await _on_unsharded(router, req, key)
    if total is None:
        total = {"n": 0}
        for i, statement in enumerate(req.body.get(key, [])):
            await _statement_on_shards(router, req, key, i, single(statement), total)
            if req.body.get("ordered", True) and total.get("writeErrors"):
                break
    if key == "updates":
        total.setdefault("nModified", 0)
    return total


async def _on_unsharded(router: Router, req: Request, key: str) -> dict[str, Any] | None:
    """Every statement in one command on the database's primary shard while the collection
    is unsharded; None once the table says it is sharded (a shard's StaleConfig refused the
    command before it wrote anything)."""
    everything = list(range(len(req.body.get(key, []))))
    for attempt in range(1, STALE_RETRIES + 2):
        targets = await _targets(router, req, None, create=True)
        if targets.route is not None:
            return None
        total: dict[str, Any] = {"n": 0}
        if not targets.shards:
            return total
        try:
            reply = await _write_part(router, req, key, (targets.shards[0], targets), everything)
        except StaleRouting:
            if attempt > STALE_RETRIES:
                raise
            await router.refreshed(attempt)
            continue
        _merge_write(total, reply, everything)
        return total
    raise AssertionError("unreachable: the last attempt returns or raises")


async def _statement_on_shards(
    router: Router, req: Request, key: str, i: int, single: bool, total: dict[str, Any]
) -> None:
    done: set[str] = set()
    stale = 0
    while True:
        targets = await _targets(router, req, req.body[key][i].get("q") or {}, create=True)
        try:
            for shard in [s for s in targets.shards if s not in done]:
                reply = await _write_part(router, req, key, (shard, targets), [i])
                done.add(shard)
                _merge_write(total, reply, [i])
                if single and reply.get("n"):
                    return
            return
        except StaleRouting:
            stale += 1
            if stale > STALE_RETRIES:
                raise
            await router.refreshed(stale)


@command("update")
async def _update(router: Router, req: Request) -> dict[str, Any]:
    return await _by_statement(router, req, "updates", lambda s: not s.get("multi"))


@command("delete")
async def _delete(router: Router, req: Request) -> dict[str, Any]:
    return await _by_statement(router, req, "deletes", lambda s: s.get("limit") == 1)


@command("findAndModify", "findandmodify")
async def _find_and_modify(router: Router, req: Request) -> dict[str, Any]:
    targets = await _targets(router, req, req.body.get("query"), create=True)
    reply: dict[str, Any] = {}
    for shard in targets.shards:
        _, reply = await router.send(shard, req.db, req.body, version=targets.version)
        if not reply.get("ok") or (reply.get("lastErrorObject") or {}).get("n"):
            break
    return reply


# -- reads -----------------------------------------------------------------------------------


async def _one_shard(router: Router, targets: Targets, req: Request) -> dict[str, Any]:
    shard = targets.shards[0]
    host, reply = await router.send(shard, req.db, req.body, read=True, version=targets.version)
    pipeline = req.body.get("pipeline") or [{}]
    router.remote_cursor(shard, host, req.db, reply, stream="$changeStream" in pipeline[0])
    return reply


async def _gather(
    router: Router, targets: Targets, req: Request, body: dict[str, Any]
) -> list[dict[str, Any]]:
    """Every document a cursor command returns on each shard, the shards asked at once."""

    async def one(shard: str) -> list[dict[str, Any]]:
        host, reply = await router.send(shard, req.db, body, read=True, version=targets.version)
        if not reply.get("ok"):
            raise CommandError(int(reply.get("code") or 1), str(reply.get("errmsg")))
        return await drain(router.shard(shard), host, req.db, reply)

    parts = await asyncio.gather(*(one(s) for s in targets.shards))
    return [doc for part in parts for doc in part]


@command("find")
async def _find(router: Router, req: Request) -> dict[str, Any]:
    targets = await _targets(router, req, req.body.get("filter"))
    if not targets.shards:
        return router.merged_cursor(_ns(req), [], req.body.get("batchSize"))
    if len(targets.shards) == 1:
        return await _one_shard(router, targets, req)
    skip, limit = int(req.body.get("skip", 0)), int(req.body.get("limit", 0))
    body = {k: v for k, v in req.body.items() if k not in ("skip", "limit", "batchSize")}
    if limit:
        body["limit"] = skip + limit
    body, at = router.snapshot_pinned(body)
    docs = await _gather(router, targets, req, body)
    if req.body.get("sort"):
        docs = sort_documents(docs, req.body["sort"])
    docs = docs[skip:]
    if limit:
        docs = docs[:limit]
    return _at(router.merged_cursor(_ns(req), docs, req.body.get("batchSize")), at)


@command("aggregate")
async def _aggregate(router: Router, req: Request) -> dict[str, Any]:
    pipeline = list(req.body.get("pipeline", []))
    first_match = pipeline[0].get("$match") if pipeline and "$match" in pipeline[0] else None
    if streams.merges(router, req, pipeline):
        return await streams.open_stream(router, req, pipeline)
    if not isinstance(req.body.get("aggregate"), str):
        return _router_aggregate(router, req, pipeline)
    targets = await _targets(router, req, first_match)
    if len(targets.shards) <= 1:
        if not targets.shards:
            return router.merged_cursor(_ns(req), [], None)
        return await _one_shard(router, targets, req)
    if any(next(iter(stage)) in ("$out", "$merge") for stage in pipeline):
        raise CommandError(263, "$out and $merge on a sharded collection are not routed by the "
                           "sandbox yet")  # fmt: skip
    split = next((i for i, s in enumerate(pipeline) if next(iter(s)) not in _PER_DOCUMENT_STAGES),
                 len(pipeline))  # fmt: skip
    body, at = router.snapshot_pinned({**req.body, "pipeline": pipeline[:split], "cursor": {}})
    docs = run_pipeline(await _gather(router, targets, req, body), pipeline[split:],
                        req.body.get("let"))  # fmt: skip
    batch = (req.body.get("cursor") or {}).get("batchSize")
    return _at(router.merged_cursor(_ns(req), docs, batch), at)


def _router_aggregate(router: Router, req: Request, pipeline: list[Any]) -> dict[str, Any]:
    """A collection-less aggregation the router answers itself: `$listLocalSessions`, its own
    sessions (the one this command runs in: a router keeps no session cache here)."""
    if not pipeline or next(iter(pipeline[0])) != "$listLocalSessions":
        raise CommandError(263, "collection-less aggregations other than $listLocalSessions are "
                           "not routed by the sandbox yet")  # fmt: skip
    lsid = req.body.get("lsid")
    sessions = [] if lsid is None else [{"_id": lsid, "lastUse": wallclock.now()}]
    docs = run_pipeline(sessions, pipeline[1:], req.body.get("let"))
    batch = (req.body.get("cursor") or {}).get("batchSize")
    return router.merged_cursor(f"{req.db}.$cmd.aggregate", docs, batch)


@command("count")
async def _count(router: Router, req: Request) -> dict[str, Any]:
    targets = await _targets(router, req, req.body.get("query"))
    total = 0
    for shard in targets.shards:
        _, reply = await router.send(shard, req.db, req.body, read=True, version=targets.version)
        if len(targets.shards) == 1:
            return reply
        if not reply.get("ok"):
            return reply
        total += int(reply.get("n", 0))
    return {"n": total}


@command("distinct")
async def _distinct(router: Router, req: Request) -> dict[str, Any]:
    targets = await _targets(router, req, req.body.get("query"))
    body, at = router.snapshot_pinned(req.body)
    values: list[Any] = []
    for shard in targets.shards:
        _, reply = await router.send(shard, req.db, body, read=True, version=targets.version)
        if not reply.get("ok"):
            return reply
        values += [v for v in reply.get("values", []) if v not in values]
    return {"values": values, **({"atClusterTime": at} if at is not None else {})}


def _at(reply: dict[str, Any], at: Any) -> dict[str, Any]:
    """A merged cursor reply of a snapshot read, with the time it read at (the driver reads
    its session's next snapshot reads there)."""
    if at is not None:
        reply["cursor"]["atClusterTime"] = at
    return reply


@command("getMore", "getmore")
async def _get_more(router: Router, req: Request) -> dict[str, Any]:
    cursor_id = int(req.body["getMore"])
    cursor = router.cursors.get(cursor_id)
    if cursor is None:
        raise CommandError(43, f"cursor id {cursor_id} not found")
    fail = router.fail_points.get(AFTER_CURSOR_CHECKOUT)
    if fail is not None and fail.fires_for(req.name, req.body, router.app_names.get(
            req.connection_id)):  # fmt: skip
        del router.cursors[cursor_id]  # as mongos: a getMore that fails kills its cursor
        await _kill(router, cursor)
        stream = isinstance(cursor, MergedStream) or getattr(cursor, "stream", False)
        code = int(fail.error_code or 96)
        raise CommandError(
            code,
            f"Failing command via '{AFTER_CURSOR_CHECKOUT}' failpoint",
            labels=_resumable(code) if stream else (),
        )
    if isinstance(cursor, MergedStream):
        return await streams.get_more(router, cursor_id, cursor, req)
    if isinstance(cursor, MergedCursor):
        size = int(req.body.get("batchSize") or len(cursor.docs))
        batch = cursor.docs[cursor.position : cursor.position + size]
        cursor.position += len(batch)
        done = cursor.position >= len(cursor.docs)
        if done:
            del router.cursors[cursor_id]
        return {"cursor": {"id": Int64(0 if done else cursor_id), "ns": cursor.ns,
                           "nextBatch": batch}}  # fmt: skip
    body = {**req.body, "getMore": Int64(cursor.cursor_id)}
    body = {k: v for k, v in body.items() if k not in ("$db", "$clusterTime", "$readPreference")}
    reply = await router.shard(cursor.shard).run_on(cursor.host, req.db, body)
    router.gossip(reply)
    answer = reply.get("cursor")
    if not reply.get("ok") or not isinstance(answer, dict) or not answer.get("id"):
        del router.cursors[cursor_id]
    else:
        answer["id"] = Int64(cursor_id)
    return reply


@command("killCursors", "killcursors")
async def _kill_cursors(router: Router, req: Request) -> dict[str, Any]:
    killed, not_found = [], []
    for cursor_id in req.body.get("cursors", []):
        cursor = router.cursors.pop(int(cursor_id), None)
        if cursor is None:
            not_found.append(cursor_id)
            continue
        killed.append(cursor_id)
        await _kill(router, cursor)
    return {"cursorsKilled": killed, "cursorsNotFound": not_found, "cursorsAlive": [],
            "cursorsUnknown": []}  # fmt: skip


async def _kill(router: Router, cursor: RemoteCursor | MergedCursor | MergedStream) -> None:
    """Kill what a router cursor holds open on the shards."""
    if isinstance(cursor, MergedStream):
        await streams.close(router, cursor)
    elif isinstance(cursor, RemoteCursor):
        kill = {"killCursors": cursor.collection, "cursors": [Int64(cursor.cursor_id)]}
        with contextlib.suppress(PeerError):  # the member is gone, and its cursor with it
            await router.shard(cursor.shard).run_on(cursor.host, cursor.db, kill)


def _resumable(code: int) -> tuple[str, ...]:
    """A stream's getMore error labels, as mongos gives them (4.4+)."""
    reply: dict[str, Any] = {"code": code}
    label_resumable(reply)
    return tuple(reply.get("errorLabels", ()))
