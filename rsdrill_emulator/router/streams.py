"""Change streams through the router. A stream on an unsharded collection is its shard's own
(handed to the client as any shard cursor); one on a whole database, the whole cluster or a
sharded collection is opened on every shard and merged, as mongos merges its shards' streams.

Each event's resume token is the shard's with the shard's index appended (two hex digits): a
stream resumed from it starts on that shard after the event and on every other shard after the
event's time. A batch's postBatchResumeToken is its last event's, or with no event the earliest
of the shards' own (none has anything before it left to send).

Unlike mongos, which holds an event until every shard's high-water mark has passed it, events
are passed on as the shards return them, in time order within a batch: the sandbox's shards
share one clock, and an idle shard here has no periodic no-op write to move its mark.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from bson.int64 import Int64
from bson.timestamp import Timestamp

from rsdrill_emulator.errors import CommandError
from rsdrill_emulator.request import Request
from rsdrill_emulator.router.router import MergedStream, Router

_INNER_LENGTHS = (32, 34, 42)  # the shards' own tokens (rsdrill_emulator/changestream.py)
_POLL_MS = 100  # each round's wait on every shard: a getMore waits no longer than this
_DEFAULT_AWAIT_S = 1.0  # mongos's, as mongod's, for a getMore without maxTimeMS
_INVALID_TOKEN, _CURSOR_KILLED = 260, 237


def merges(router: Router, req: Request, pipeline: list[Any]) -> bool:
    """Whether an aggregate opens a stream the router merges from every shard."""
    if not pipeline or "$changeStream" not in pipeline[0]:
        return False
    target = req.body.get("aggregate")
    return not isinstance(target, str) or f"{req.db}.{target}" in router.catalog.table.collections


async def open_stream(router: Router, req: Request, pipeline: list[Any]) -> dict[str, Any]:
    """The aggregate opening a merged stream: the same on every shard, each from its own
    starting point, their first batches merged."""
    spec = dict(pipeline[0]["$changeStream"])
    key = next((k for k in ("resumeAfter", "startAfter") if k in spec), None)
    origin, inner = _split(router, spec.pop(key)) if key else (None, None)
    target = req.body.get("aggregate")
    collection = target if isinstance(target, str) else "$cmd.aggregate"
    stream = MergedStream(f"{req.db}.{collection}", req.db, collection, {},
                          last=_tag(inner, sorted(router.shards).index(origin)) if inner and origin
                          else {})  # fmt: skip
    events: list[dict[str, Any]] = []
    for index, shard in enumerate(sorted(router.shards)):
        own = dict(spec)
        if inner is not None:
            if shard == origin:
                own[key or "resumeAfter"] = inner
            else:
                own["startAtOperationTime"] = _after(inner)
        body = {**req.body, "pipeline": [{"$changeStream": own}, *pipeline[1:]], "cursor": {}}
        host, reply = await router.send(shard, req.db, body, read=True)
        if not reply.get("ok"):
            await close(router, stream)
            return reply
        cursor = reply["cursor"]
        if cursor.get("id"):
            stream.cursors[shard] = (host, int(cursor["id"]))
        stream.marks[shard] = cursor.get("postBatchResumeToken") or {}
        events += _tagged(cursor.get("firstBatch") or [], index)
    events = await _until_invalidated(router, stream, _ordered(events))
    cursor_id = router.new_cursor_id() if stream.cursors else 0
    if cursor_id:
        router.cursors[cursor_id] = stream
    return _reply(router, stream, cursor_id, events, "firstBatch")


async def get_more(
    router: Router, cursor_id: int, stream: MergedStream, req: Request
) -> dict[str, Any]:
    """The events every shard has now, waiting up to maxTimeMS (in short rounds over all of
    them, so that no shard's wait holds back another's events)."""
    max_time = req.body.get("maxTimeMS")
    deadline = time.monotonic() + (float(max_time) / 1000 if max_time else _DEFAULT_AWAIT_S)
    size = req.body.get("batchSize")
    while True:
        if cursor_id not in router.cursors:  # closed meanwhile (killCursors): as mongos
            raise CommandError(_CURSOR_KILLED, f"cursor id {cursor_id} was killed")
        asked = list(stream.cursors.items())
        replies = await asyncio.gather(*(
            _next(router, shard, host, cid, stream.db, stream.collection, size)
            for shard, (host, cid) in asked
        ))  # fmt: skip
        if cursor_id not in router.cursors:
            raise CommandError(_CURSOR_KILLED, f"cursor id {cursor_id} was killed")
        events: list[dict[str, Any]] = []
        for (shard, _), reply in zip(asked, replies, strict=True):
            if not reply.get("ok"):
                router.cursors.pop(cursor_id, None)
                await close(router, stream)
                return reply
            cursor = reply["cursor"]
            stream.marks[shard] = cursor.get("postBatchResumeToken") or stream.marks[shard]
            events += _tagged(cursor.get("nextBatch") or [], sorted(router.shards).index(shard))
            if not cursor.get("id"):
                stream.cursors.pop(shard, None)
        if events or not stream.cursors or time.monotonic() >= deadline:
            break
    events = await _until_invalidated(router, stream, _ordered(events))
    if not stream.cursors:
        router.cursors.pop(cursor_id, None)
        cursor_id = 0
    return _reply(router, stream, cursor_id, events, "nextBatch")


async def _until_invalidated(
    router: Router, stream: MergedStream, events: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The events up to the first invalidate, which ends the whole stream (every shard's
    cursor closed): one client stream is invalidated once, as on mongos."""
    for i, event in enumerate(events):
        if event.get("operationType") == "invalidate":
            await close(router, stream)
            return events[: i + 1]
    return events


async def close(router: Router, stream: MergedStream) -> None:
    """Kill every shard's cursor of the stream (a member that is gone took its cursor along)."""
    for shard, (host, cid) in stream.cursors.items():
        kill = {"killCursors": stream.collection, "cursors": [Int64(cid)]}
        try:
            await router.shard(shard).run_on(host, stream.db, kill)
        except Exception:
            continue
    stream.cursors.clear()


async def _next(router: Router, shard: str, host: str, cursor_id: int, db: str, collection: str,
                size: Any) -> dict[str, Any]:  # fmt: skip
    body: dict[str, Any] = {"getMore": Int64(cursor_id), "collection": collection,
                            "maxTimeMS": _POLL_MS}  # fmt: skip
    if size:
        body["batchSize"] = size
    reply = await router.shard(shard).run_on(host, db, body)
    router.gossip(reply)
    return reply


def _reply(router: Router, stream: MergedStream, cursor_id: int, events: list[dict[str, Any]],
           batch: str) -> dict[str, Any]:  # fmt: skip
    """The batch with its postBatchResumeToken, which never goes back: a shard that had
    nothing since before the stream's start point reports its own older position."""
    if events:
        mark = events[-1]["_id"]
    else:
        names = sorted(router.shards)
        shard = min((s for s in stream.marks if stream.marks[s].get("_data")),
                    key=lambda s: _time_key(stream.marks[s]), default=None)  # fmt: skip
        mark = _tag(stream.marks[shard], names.index(shard)) if shard is not None else {}
    if stream.last and (not mark or _time_key(mark) < _time_key(stream.last)):
        mark = stream.last
    stream.last = mark
    cursor = {batch: events, "postBatchResumeToken": mark, "id": Int64(cursor_id),
              "ns": stream.ns}  # fmt: skip
    return {"cursor": cursor}


def _tagged(events: list[dict[str, Any]], index: int) -> list[dict[str, Any]]:
    return [{**e, "_id": _tag(e["_id"], index)} if isinstance(e.get("_id"), dict) else e
            for e in events]  # fmt: skip


def _tag(token: dict[str, Any], index: int) -> dict[str, Any]:
    return {"_data": f"{token['_data']}{index:02X}"}


def _split(router: Router, token: Any) -> tuple[str, dict[str, Any]]:
    """The shard a router token came from and that shard's own token."""
    data = token.get("_data") if isinstance(token, dict) else None
    names = sorted(router.shards)
    if not isinstance(data, str) or len(data) - 2 not in _INNER_LENGTHS:
        raise CommandError(_INVALID_TOKEN, f"invalid resume token: {token!r}")
    try:
        index = int(data[-2:], 16)
    except ValueError:
        raise CommandError(_INVALID_TOKEN, f"invalid resume token: {token!r}") from None
    if index >= len(names):
        raise CommandError(_INVALID_TOKEN, f"resume token from an unknown shard: {token!r}")
    return names[index], {"_data": data[:-2]}


def _time_key(token: dict[str, Any]) -> str:
    return str(token.get("_data", ""))[:16]  # seconds and increment, hex: in time order


def _after(inner: dict[str, Any]) -> Timestamp:
    """The first time after the one a shard token stands at."""
    data = inner["_data"]
    return Timestamp(int(data[:8], 16), int(data[8:16], 16) + 1)


def _ordered(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(events, key=lambda e: _time_key(e.get("_id") or {}))
