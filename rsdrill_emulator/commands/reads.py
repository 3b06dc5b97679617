"""find, count, distinct, aggregate (change streams included), getMore and killCursors."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

from bson.int64 import Int64
from bson.objectid import ObjectId
from bson.timestamp import Timestamp

from rsdrill_emulator import (
    changestream,
    expressions,
    indexes,
    pipeline,
    query,
    wallclock,
)
from rsdrill_emulator.commands.base import OPLOG_NS, Request, _admin_only, _ns
from rsdrill_emulator.commands.dispatcher import command
from rsdrill_emulator.commands.documents import _check_unique, _collection, _matching
from rsdrill_emulator.errors import (
    CommandError,
)
from rsdrill_emulator.failpoint import (
    AFTER_CURSOR_CHECKOUT,
    CloseConnection,
)
from rsdrill_emulator.node import MemberState, Node
from rsdrill_emulator.oplog import NULL_OPTIME, OpTime
from rsdrill_emulator.peer import PeerError
from rsdrill_emulator.projection import project

if TYPE_CHECKING:
    from rsdrill_emulator.commands.dispatcher import Commands


def _oplog_documents(node: Node, body: dict[str, Any]) -> list[dict[str, Any]]:
    """`local.oplog.rs` in natural (oplog) order, newest first with sort `{$natural: -1}`.

    Only `$natural` orders it. Tools read its first and last entries this way (the oplog
    window of `db.getReplicationInfo()`), and the data audit its newest ones; reading one end
    touches only the entries read.
    """
    sort = dict(body.get("sort") or {})
    if set(sort) - {"$natural"} or sort.get("$natural", 1) not in (1, -1):
        raise CommandError(2, f"the sandbox sorts {OPLOG_NS} only by $natural (1 or -1)")
    newest_first = sort.get("$natural", 1) == -1
    oplog = node.oplog
    filt = body.get("filter") or {}
    limit = abs(int(body.get("limit") or 0))
    if not filt and not body.get("skip") and limit == 1:
        entry = oplog.newest_entry() if newest_first else oplog.entry_at(oplog.oldest)
        return [] if entry is None else [entry]
    if not filt and not body.get("skip") and limit and newest_first:
        return oplog.newest_entries(limit)  # the oplog's tail, as the audit compares it
    predicate = query.compile_filter(filt)
    bound = _ts_lower_bound(filt)
    scanned = (
        oplog.entries_after(NULL_OPTIME, max_bytes=1 << 62)
        if bound is None
        else oplog.entries_from_ts(*bound)
    )
    docs = [e for e in scanned if predicate(e)]
    return docs[::-1] if newest_first else docs


def _ts_lower_bound(filt: dict[str, Any]) -> tuple[Timestamp, bool] | None:
    """A top-level `ts: {$gt|$gte: Timestamp}` of an oplog filter (a migration's catch-up, a
    tool tailing the oplog): where its scan may start, and whether the bound is included."""
    cond = filt.get("ts")
    if not isinstance(cond, dict):
        return None
    for op, inclusive in (("$gt", False), ("$gte", True)):
        if isinstance(cond.get(op), Timestamp):
            return cond[op], inclusive
    return None


def _filtered(cmds: Commands, req: Request, ns: str) -> list[dict[str, Any]]:
    filt = req.body.get("filter") or {}
    if ns == OPLOG_NS:
        docs = _oplog_documents(cmds.node, req.body)
    else:
        variables = expressions.evaluate_let(req.body.get("let"))
        docs = _matching(cmds.node, ns, filt, variables, req.body.get("collation"),
                         req.body.get("sort"))  # fmt: skip
    skip = int(req.body.get("skip") or 0)
    limit = abs(int(req.body.get("limit") or 0))
    docs = docs[skip:]
    if limit:
        docs = docs[:limit]
    projection = req.body.get("projection")
    if projection:
        docs = [project(d, projection) for d in docs]
    return docs


@command("find")
async def _find(cmds: Commands, req: Request) -> dict[str, Any]:
    cmds.check_readable(req)
    await cmds.majority_read_barrier(req)
    cmds.opcounters["query"] += 1
    ns = _ns(req)
    docs = _filtered(cmds, req, ns)
    if req.body.get("returnKey"):
        index = _index_used(cmds.node, ns, req.body)
        docs = [(indexes.key_value(index, d) or {}) if index else {} for d in docs]
    batch = req.body.get("batchSize")
    single = bool(req.body.get("singleBatch")) or int(req.body.get("limit") or 0) < 0
    return cmds.open_cursor(ns, docs, int(batch) if batch is not None else None, single)


def _index_used(node: Node, ns: str, body: dict[str, Any]) -> dict[str, Any] | None:
    """The index a find would read, for `returnKey` (None: a collection scan, whose documents
    have no key): the hinted one, else the first whose leading field the filter names, else
    one whose fields lead with the sort's."""
    candidates = [{"key": {"_id": 1}, "name": "_id_"}, *node.store.indexes(ns)]
    hint = body.get("hint")
    if hint:
        return next((i for i in candidates if hint in (i["name"], i["key"])), None)
    filt, sort = body.get("filter") or {}, list(body.get("sort") or {})
    for index in candidates:
        if next(iter(index["key"])) in filt:
            return index
    for index in candidates:
        if sort and list(index["key"])[: len(sort)] == sort:
            return index
    return None


@command("collStats")
async def _coll_stats(cmds: Commands, req: Request) -> dict[str, Any]:
    """Only for the oplog: its size against its cap (the other half of the oplog window)."""
    ns = _ns(req)
    if ns != OPLOG_NS:
        raise CommandError(115, f"the sandbox answers collStats only for {OPLOG_NS}")
    oplog = cmds.node.oplog
    return {
        "ns": ns,
        "count": len(oplog),
        "size": Int64(oplog.size_bytes),
        "capped": True,
        "maxSize": Int64(oplog.capacity_bytes),
    }


@command("count")
async def _count(cmds: Commands, req: Request) -> dict[str, Any]:
    cmds.check_readable(req)
    await cmds.majority_read_barrier(req)
    ns = _ns(req)
    body = {**req.body, "filter": req.body.get("query") or {}}
    return {"n": len(_filtered(cmds, Request(req.db, "count", body, True, 0), ns))}


@command("aggregate")
async def _aggregate(cmds: Commands, req: Request) -> dict[str, Any]:
    """A collection's pipeline, or a database's (`aggregate: 1`, starting with a source stage
    such as `$documents` or `$listLocalSessions`); a final `$out` / `$merge` writes the results
    and the cursor is empty."""
    cmds.check_readable(req)
    await cmds.majority_read_barrier(req)
    raw = req.body.get("pipeline")
    if not isinstance(raw, list):
        raise CommandError(14, "'pipeline' option must be specified as an array")
    stages = pipeline.parse_pipeline(raw)
    variables = expressions.evaluate_let(req.body.get("let"))
    source = pipeline.source_stage(raw)
    on_database = req.body.get("aggregate") == 1 and not isinstance(req.body["aggregate"], bool)
    if on_database and source is None:
        raise CommandError(73, "{aggregate: 1} is not valid for the first stage; a collection "
                               "is required.")  # fmt: skip
    ns = f"{req.db}.$cmd.aggregate" if on_database else _ns(req)
    batch = (req.body.get("cursor") or {}).get("batchSize")
    if source is not None and source[0] == "$changeStream":
        return _open_change_stream(cmds, req, ns, source[1], raw[1:], batch)
    output = stages[-1] if stages and stages[-1][0] in pipeline.OUTPUT_STAGES else None
    if output and (req.body.get("readConcern") or {}).get("level") == "linearizable":
        raise CommandError(72, f"{output[0]} cannot be used with a 'linearizable' read concern")
    middle = raw[1 if source else 0 : len(raw) - (1 if output else 0)]
    count = None if source or cmds.node.store.view(ns) else _whole_collection_count(middle)
    if source is not None:
        docs = pipeline.run_pipeline(_source_documents(cmds, req, *source, variables), middle,
                                     variables)  # fmt: skip
    elif count is not None:
        # count_documents({}) on a big collection: count rows instead of decoding them all.
        total = cmds.node.store.count(ns)
        docs = [{"_id": count[0], count[1]: total}] if total else []
    else:
        docs = pipeline.run_pipeline(_collection(cmds.node, ns), middle, variables)
    if output is None:
        return cmds.open_cursor(ns, docs, int(batch) if batch is not None else None)
    target = pipeline.output_target(*output, req.db)
    node = cmds.node
    if node.state is MemberState.SECONDARY and node.primary_host:
        # As mongod 5.0+: a secondary runs the pipeline, the primary writes its results.
        forwarded_stages = [{"$documents": {"$literal": docs}}, {output[0]: output[1]}]
        forwarded: dict[str, Any] = {"aggregate": 1, "pipeline": forwarded_stages, "cursor": {}}
        if "writeConcern" in req.body:
            forwarded["writeConcern"] = req.body["writeConcern"]
        try:
            reply = await node.peer_calls.call(
                node.primary_host, forwarded, purpose="aggregate", timeout=30, db=req.db
            )
        except PeerError as exc:
            raise CommandError(10107, f"could not reach the primary to write: {exc}") from None
        if reply.get("ok") != 1:
            return {k: v for k, v in reply.items() if k not in ("$clusterTime", "operationTime")}
        return cmds.open_cursor(ns, [], None)
    node.require_writable()
    optime = _write_output(cmds, target, docs)
    return await cmds.finish_write(req, cmds.open_cursor(ns, [], None), optime)


def _open_change_stream(
    cmds: Commands, req: Request, ns: str, spec: Any, rest: list[Any], batch: Any
) -> dict[str, Any]:
    node = cmds.node
    target = req.body["aggregate"]
    level = (req.body.get("readConcern") or {}).get("level")
    if level not in (None, "majority"):
        # A stream reads majority-committed entries only; mongod refuses any other promise.
        raise CommandError(72, f"$changeStream does not support read concern {level!r}: "
                               "only 'majority' (the default)")  # fmt: skip
    stream = changestream.open_stream(node, req.db, target, spec, rest, ns)
    cursor_id = random.randint(1, 2**62)
    cmds.cursors[cursor_id] = stream
    size = int(batch) if batch is not None else None
    return changestream.reply(cursor_id, stream, changestream.first_batch(node, stream, size), True)


def _source_documents(
    cmds: Commands, req: Request, name: str, spec: Any, variables: dict[str, Any]
) -> list[dict[str, Any]]:
    if name == "$documents":
        return pipeline.documents_stage(spec, variables)
    if name == "$listLocalSessions":
        # The sandbox keeps no session cache: the session this command runs in is the one known.
        lsid = req.body.get("lsid")
        return [] if lsid is None else [{"_id": lsid, "lastUse": wallclock.now()}]
    _admin_only(req)  # $currentOp: every request the member is answering now, this one too
    return [_current_op(op_id, r) for op_id, r in cmds.in_progress.items()]


# $currentOp's `op` of the commands mongod names apart (every other one is "command").
_OP_KINDS = {"insert": "insert", "update": "update", "delete": "remove", "getmore": "getmore"}
# Commands whose body carries a login's secrets: $currentOp shows their name only.
_SECRET_COMMANDS = frozenset({"saslstart", "saslcontinue", "authenticate", "createuser",
                              "updateuser"})  # fmt: skip


def _current_op(op_id: int, req: Request) -> dict[str, Any]:
    """A request in progress as mongod's $currentOp shows it (no lock or timing fields)."""
    name = req.name.lower()
    target = req.body.get("collection" if name == "getmore" else req.name)
    ns = f"{req.db}.{target}" if isinstance(target, str) and target else f"{req.db}.$cmd"
    body = {req.name: 1} if name in _SECRET_COMMANDS else req.body
    return {"type": "op", "active": True, "opid": op_id, "connectionId": req.connection_id,
            "op": _OP_KINDS.get(name, "command"), "ns": ns, "command": body}  # fmt: skip


def _write_output(
    cmds: Commands, target: pipeline.OutputTarget, docs: list[dict[str, Any]]
) -> OpTime | None:
    """Write an aggregation's results as `$out` (the collection becomes them) or `$merge`."""
    node = cmds.node
    ns = f"{target.db}.{target.coll}"
    optime = None
    if target.replace_all:
        docs = [doc if "_id" in doc else {"_id": ObjectId(), **doc} for doc in docs]
        if node.store.exists(ns):
            optime = node.write("c", f"{target.db}.$cmd", {"drop": target.coll})
        optime = node.write("c", f"{target.db}.$cmd", {"create": target.coll})
        for doc in docs:
            optime = node.write("i", ns, doc)
        return optime
    for doc in pipeline.merged_documents(target, docs, lambda doc_id: node.store.get(ns, doc_id)):
        _check_unique(node, ns, doc)
        optime = node.write("i", ns, doc)
    return optime


def _whole_collection_count(pipeline: list[Any]) -> tuple[Any, str] | None:
    """(group _id, output field) when the pipeline is `[{$match: {}}, {$group: {_id: c,
    <field>: {$sum: 1}}}]`, pymongo's count_documents({}); None otherwise."""
    if len(pipeline) != 2 or pipeline[0] != {"$match": {}}:
        return None
    group = pipeline[1].get("$group") if isinstance(pipeline[1], dict) else None
    if not isinstance(group, dict) or len(group) != 2 or isinstance(group.get("_id"), dict | str):
        return None
    ((field, accumulator),) = ((k, v) for k, v in group.items() if k != "_id")
    if accumulator != {"$sum": 1}:
        return None
    return group["_id"], field


@command("getMore")
async def _get_more(cmds: Commands, req: Request) -> dict[str, Any]:
    cmds.opcounters["getmore"] += 1
    cursor_id = int(req.body.get("getMore") or 0)
    cursor = cmds.cursors.get(cursor_id)
    if cursor is None:
        raise CommandError(43, f"cursor id {cursor_id} not found")
    fail = cmds.fail_points.get(AFTER_CURSOR_CHECKOUT)
    app = cmds.app_names.get(req.connection_id)
    if fail is not None and fail.fires_for(req.name, req.body, app):
        del cmds.cursors[cursor_id]  # as on mongod: a getMore that fails kills its cursor
        if fail.close_connection:
            raise CloseConnection
        raise CommandError(int(fail.error_code or 96),
                           f"Failing command via '{AFTER_CURSOR_CHECKOUT}' failpoint")  # fmt: skip
    batch_size = req.body.get("batchSize")
    if isinstance(cursor, changestream.ChangeStreamCursor):
        size = int(batch_size) if batch_size else None
        events = await changestream.next_batch(cmds.node, cursor, size, req.body.get("maxTimeMS"))
        reply = changestream.reply(cursor_id, cursor, events, False)
        if reply["cursor"]["id"] == 0:
            del cmds.cursors[cursor_id]
        return reply
    batch = cmds._next_batch(cursor, int(batch_size) if batch_size else None)
    if cursor.position >= len(cursor.docs):
        del cmds.cursors[cursor_id]
        cursor_id = 0
    return {"cursor": {"nextBatch": batch, "id": Int64(cursor_id), "ns": cursor.ns}}


@command("killCursors")
async def _kill_cursors(cmds: Commands, req: Request) -> dict[str, Any]:
    killed: list[Int64] = []
    missing: list[Int64] = []
    for cid in req.body.get("cursors") or []:
        (killed if cmds.cursors.pop(int(cid), None) else missing).append(Int64(int(cid)))
    return {
        "cursorsKilled": killed,
        "cursorsNotFound": missing,
        "cursorsAlive": [],
        "cursorsUnknown": [],
    }
