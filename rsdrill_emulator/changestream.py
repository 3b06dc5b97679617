"""Change streams: `$changeStream` cursors that turn the member's oplog into change events.

A stream reads majority-committed entries only, as mongod's do, so an event it returns is never
rolled back. Its resume token encodes the oplog position of the event (or, between events, of
the newest entry looked at), and every member of the set holds the same entries at the same
positions: a client resuming on a new primary after a failover continues where it stopped.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from bson.int64 import Int64
from bson.timestamp import Timestamp

from rsdrill_emulator.errors import CommandError
from rsdrill_emulator.oplog import NULL_OPTIME, OpTime, is_prepare
from rsdrill_emulator.pipeline import run_pipeline
from rsdrill_emulator.updatediff import describe, is_diff

if TYPE_CHECKING:
    from rsdrill_emulator.node import Node

# Stages allowed after $changeStream (MongoDB's list, less those the sandbox lacks).
_ALLOWED_STAGES = frozenset(
    {"$match", "$project", "$addFields", "$set", "$unset", "$replaceRoot", "$replaceWith"}
)
_OPTIONS = frozenset(
    {"allChangesForCluster", "fullDocument", "fullDocumentBeforeChange", "resumeAfter",
     "startAfter", "startAtOperationTime", "showExpandedEvents"}
)  # fmt: skip
_INTERNAL_DATABASES = frozenset({"admin", "config", "local"})
# How long a getMore waits for an event when the client gives no maxTimeMS (mongod: 1 s).
DEFAULT_AWAIT_S = 1.0
_SCAN_BYTES = 4 * 1024 * 1024
_NOT_ALLOWED, _FATAL, _HISTORY_LOST = 20, 280, 286  # IllegalOperation, ChangeStream*Error
_FULL_DOCUMENT = ("default", "updateLookup", "whenAvailable", "required")
_BEFORE_CHANGE = ("off", "whenAvailable", "required")
# Errors after which a client may resume a stream: mongod 4.4+ labels them on a stream's getMore.
RESUMABLE_CODES = frozenset(
    {6, 7, 63, 89, 91, 133, 150, 189, 234, 262, 9001, 10107, 11600, 11602, 13388, 13435, 13436}
)


def label_resumable(reply: dict[str, Any]) -> None:
    """Label a failed getMore of a stream that a client may resume, as mongod 4.4+ does."""
    labels = reply.setdefault("errorLabels", [])
    if reply.get("code") in RESUMABLE_CODES and "ResumableChangeStreamError" not in labels:
        labels.append("ResumableChangeStreamError")
    if not labels:
        del reply["errorLabels"]


# Appended to the token of an invalidate event (mongod's `fromInvalidate`): it sorts after the
# token of the drop that caused it, and only startAfter may start from it.
_FROM_INVALIDATE = "01"
# Appended, with the operation's index (8 hex digits), to the token of an event of a committed
# transaction (mongod's `txnOpIndex`): one oplog entry holds the whole transaction.
_TXN_OP = "02"


class ResumePoint(NamedTuple):
    """Where a resume token stands: an oplog entry, and within a transaction's entry the
    operation; `from_invalidate` for an invalidate event's token."""

    position: OpTime
    from_invalidate: bool = False
    op_index: int | None = None


def resume_token(
    position: OpTime, *, invalidate: bool = False, op_index: int | None = None
) -> dict[str, Any]:
    """An opaque token for an oplog position; hex in time order, as mongod's compare."""
    data = f"{position.secs:08X}{position.inc:08X}{position.term + 1:016X}"
    if invalidate:
        data += _FROM_INVALIDATE
    elif op_index is not None:
        data += f"{_TXN_OP}{op_index:08X}"
    return {"_data": data}


def position_of(token: Any) -> ResumePoint:
    """Where a resume token stands (InvalidResumeToken when it is not ours)."""
    data = token.get("_data") if isinstance(token, dict) else None
    if not isinstance(data, str) or len(data) not in (32, 34, 42):
        raise CommandError(260, f"invalid resume token: {token!r}")
    suffix = data[32:]
    try:
        secs, inc, term = int(data[:8], 16), int(data[8:16], 16), int(data[16:32], 16) - 1
        if suffix[:2] == _TXN_OP and len(suffix) == 10:
            return ResumePoint(OpTime(term, secs, inc), op_index=int(suffix[2:], 16))
    except ValueError:
        raise CommandError(260, f"invalid resume token: {token!r}") from None
    if suffix not in ("", _FROM_INVALIDATE):
        raise CommandError(260, f"invalid resume token: {token!r}")
    return ResumePoint(OpTime(term, secs, inc), from_invalidate=suffix == _FROM_INVALIDATE)


@dataclass
class ChangeStreamCursor:
    """An open change stream: what it watches, where it stands, what it does with events."""

    ns: str  # the cursor's namespace as the client sees it
    db: str | None  # None: the whole cluster
    coll: str | None  # None: the whole database (or cluster)
    position: OpTime
    pipeline: list[Any]
    full_document: str = "default"
    before_change: str = "off"  # fullDocumentBeforeChange
    show_expanded: bool = False  # create, createIndexes and dropIndexes events too
    invalidated: bool = False
    pending: list[dict[str, Any]] = field(default_factory=list)
    # Resumed inside a transaction's entry (at `position`): the operation to go on from.
    next_op: int | None = None


def open_stream(
    node: Node, db: str, target: Any, spec: Any, rest: list[Any], ns: str
) -> ChangeStreamCursor:
    """A cursor for `{$changeStream: spec}` on `target` (a collection name, or 1 for the
    database, or the cluster with `allChangesForCluster` on admin)."""
    if not isinstance(spec, dict) or set(spec) - _OPTIONS:
        unknown = sorted(set(spec) - _OPTIONS) if isinstance(spec, dict) else [spec]
        raise CommandError(40415, f"unknown $changeStream option: {unknown[0]!r}")
    for stage in rest:
        if not isinstance(stage, dict) or next(iter(stage), None) not in _ALLOWED_STAGES:
            raise CommandError(_NOT_ALLOWED, f"stage not allowed in a change stream: {stage!r}")
    if spec.get("allChangesForCluster"):
        if db != "admin" or target != 1:
            raise CommandError(
                _NOT_ALLOWED,
                "allChangesForCluster only on the admin database with {aggregate: 1}",
            )
        watched_db, coll = None, None
    elif target == 1:
        if db in _INTERNAL_DATABASES:
            raise CommandError(73, f"$changeStream may not be opened on the internal {db} "
                                   "database")  # fmt: skip
        watched_db, coll = db, None
    else:
        watched_db, coll = db, target
    full_document = spec.get("fullDocument", "default")
    if full_document not in _FULL_DOCUMENT:
        raise CommandError(2, f"fullDocument must be one of {', '.join(_FULL_DOCUMENT)}, "
                              f"not {full_document!r}")  # fmt: skip
    before_change = spec.get("fullDocumentBeforeChange", "off")
    if before_change not in _BEFORE_CHANGE:
        raise CommandError(2, f"fullDocumentBeforeChange must be one of "
                              f"{', '.join(_BEFORE_CHANGE)}, not {before_change!r}")  # fmt: skip
    start = _start(node, spec)
    return ChangeStreamCursor(
        ns=ns,
        db=watched_db,
        coll=coll,
        position=start.position,
        pipeline=rest,
        full_document=full_document,
        before_change=before_change,
        show_expanded=bool(spec.get("showExpandedEvents")),
        next_op=None if start.op_index is None else start.op_index + 1,
    )


def _start(node: Node, spec: dict[str, Any]) -> ResumePoint:
    """Where a new stream reads after: a resume token's point, a time's, or now."""
    token = spec.get("resumeAfter", spec.get("startAfter"))
    if token is not None:
        point = position_of(token)
        if point.from_invalidate and "resumeAfter" in spec:
            raise CommandError(260, "Attempting to resume a change stream using 'resumeAfter' is "
                                    "not allowed from an invalidate notification.")  # fmt: skip
        position = point.position
        if node.oplog.contains(position):
            return point
        if position < node.oplog.oldest:
            raise CommandError(_HISTORY_LOST,
                               "the resume point may no longer be in the oplog")  # fmt: skip
        raise CommandError(_FATAL,
                           "cannot resume: the resume token was not found")  # fmt: skip
    at = spec.get("startAtOperationTime")
    if isinstance(at, Timestamp):
        return ResumePoint(_before(node, at))
    return ResumePoint(node.commit_point)


def _before(node: Node, at: Timestamp) -> OpTime:
    """The position just before the first entry at or after time `at`."""
    previous = NULL_OPTIME
    while True:
        entries = node.oplog.entries_after(previous, _SCAN_BYTES)
        for entry in entries:
            if entry["ts"] >= at:
                return previous
            previous = OpTime.of(entry)
        if not entries:
            return previous


def first_batch(node: Node, cursor: ChangeStreamCursor, batch_size: int | None) -> list[Any]:
    """Events already there when the stream opens (a resumed stream's backlog)."""
    return _collect(node, cursor, batch_size)


async def next_batch(
    node: Node, cursor: ChangeStreamCursor, batch_size: int | None, max_time_ms: Any
) -> list[dict[str, Any]]:
    """getMore: the events since the last batch, waiting up to maxTimeMS for one to come."""
    wait_s = float(max_time_ms) / 1000 if max_time_ms else DEFAULT_AWAIT_S
    deadline = time.monotonic() + wait_s
    while True:
        events = _collect(node, cursor, batch_size)
        if events or cursor.invalidated or time.monotonic() >= deadline:
            return events
        await node.progress.wait(deadline - time.monotonic())


def reply(cursor_id: int, cursor: ChangeStreamCursor, batch: list[Any], first: bool) -> Any:
    """The cursor reply, with the token a client resumes from when the batch is empty (its
    last event's when more of the same entry wait: resuming must not skip them)."""
    token = batch[-1]["_id"] if batch and cursor.pending else resume_token(cursor.position)
    return {
        "cursor": {
            "firstBatch" if first else "nextBatch": batch,
            "postBatchResumeToken": token,
            "id": Int64(0 if cursor.invalidated and not cursor.pending else cursor_id),
            "ns": cursor.ns,
        }
    }


def _collect(
    node: Node, cursor: ChangeStreamCursor, batch_size: int | None
) -> list[dict[str, Any]]:
    limit = batch_size if batch_size else 101
    out: list[dict[str, Any]] = cursor.pending[:limit]
    del cursor.pending[:limit]
    if cursor.next_op is not None:  # resumed inside a transaction: the rest of its entry
        first, cursor.next_op = cursor.next_op, None
        entry = node.oplog.entry_at(cursor.position)
        if entry is not None:
            _take(cursor, _events(node, cursor, entry, first), out, limit)
    committed = node.commit_point
    while len(out) < limit and not cursor.invalidated and cursor.position < committed:
        entries = node.oplog.entries_after(cursor.position, _SCAN_BYTES)
        if not entries:
            break
        for entry in entries:
            position = OpTime.of(entry)
            if position > committed:
                return out
            cursor.position = position
            _take(cursor, _events(node, cursor, entry), out, limit)
            if len(out) >= limit or cursor.invalidated:
                return out
    return out


def _take(
    cursor: ChangeStreamCursor, events: list[dict[str, Any]], out: list[Any], limit: int
) -> None:
    """One entry's events through the stream's pipeline, into the batch up to `limit`, the
    rest held for the next one."""
    tokens = [event["_id"] for event in events]
    events = run_pipeline(events, cursor.pipeline)
    if any(event.get("_id") not in tokens for event in events):
        raise CommandError(
            _FATAL,
            "Encountered an event whose _id field, which contains the resume token, "
            "was modified by the pipeline",
            labels=("NonResumableChangeStreamError",),
        )
    room = limit - len(out)
    out += events[:room]
    cursor.pending += events[room:]


def _events(
    node: Node, cursor: ChangeStreamCursor, entry: dict[str, Any], first_op: int = 0
) -> list[Any]:
    """The change events one oplog entry means to this stream: none, one, drop+invalidate, or
    one per operation of a committed transaction (from `first_op` on)."""
    position = OpTime.of(entry)
    if is_prepare(entry):
        return []  # its events come with its commit
    if entry["op"] == "c" and "applyOps" in entry["o"]:
        # mongod's events of a transaction carry its session and number.
        session = {k: entry[k] for k in ("lsid", "txnNumber") if k in entry}
        when = {"ts": entry["ts"], "wall": entry.get("wall")}
        return [
            event | session
            for index, op in enumerate(entry["o"]["applyOps"])
            if index >= first_op
            for event in _op_events(
                node, cursor, op | when, resume_token(position, op_index=index), None
            )
        ]
    return _op_events(node, cursor, entry, resume_token(position), position)


def _op_events(
    node: Node,
    cursor: ChangeStreamCursor,
    entry: dict[str, Any],
    token: dict[str, Any],
    imaged_at: OpTime | None,
) -> list[Any]:
    """The events of one operation (an entry of its own, or one of a transaction's, which
    has no images: `imaged_at` None)."""
    op, ns = entry["op"], entry["ns"]
    db, _, coll = ns.partition(".")
    if op == "n" or not _watched(cursor, db, coll if op != "c" else None):
        return []
    base = {"_id": token, "clusterTime": entry["ts"], "wallTime": entry.get("wall")}
    if op == "c":
        return _command_events(cursor, db, entry["o"], base)
    event: dict[str, Any] = {**base, "ns": {"db": db, "coll": coll}}
    if op == "i":
        doc = entry["o"]
        return [event | {"operationType": "insert", "fullDocument": doc,
                         "documentKey": {"_id": doc["_id"]}}]  # fmt: skip
    # Kept at apply time for a collection with changeStreamPreAndPostImages enabled; looked up
    # only by a stream that asks for them.
    wanted = cursor.before_change != "off" or cursor.full_document in ("whenAvailable", "required")
    at = imaged_at
    images = node.store.images(at.term, at.secs, at.inc) if wanted and at is not None else None
    pre, post = images if images is not None else (None, None)
    if op == "u":
        o, doc_id = entry["o"], entry["o2"]["_id"]
        key = {"documentKey": {"_id": doc_id}}
        if not is_diff(o):  # a replacement: the entry holds the document
            replace = event | {"operationType": "replace", "fullDocument": o} | key
            return [_before_change(cursor, replace, pre)]
        description = describe(o["diff"], disambiguate=cursor.show_expanded)
        update = event | {"operationType": "update"} | key | {"updateDescription": description}
        if cursor.full_document == "updateLookup":
            update["fullDocument"] = node.store.get(ns, doc_id)
        elif cursor.full_document in ("whenAvailable", "required"):
            update["fullDocument"] = _image(post, cursor.full_document, "post")
        return [_before_change(cursor, update, pre)]
    if op == "d":
        delete = event | {"operationType": "delete", "documentKey": {"_id": entry["o"]["_id"]}}
        return [_before_change(cursor, delete, pre)]
    return []


def _before_change(cursor: ChangeStreamCursor, event: dict[str, Any], pre: Any) -> dict[str, Any]:
    if cursor.before_change == "off":
        return event
    return event | {"fullDocumentBeforeChange": _image(pre, cursor.before_change, "pre")}


def _image(image: Any, mode: str, which: str) -> Any:
    """An event's pre- or post-image: None when none was kept, unless the stream requires it."""
    if image is None and mode == "required":
        raise CommandError(
            47,
            f"Change stream was configured to require a {which}-image for all update, delete "
            f"and replace events, but the {which}-image was not found for event",
        )
    return image


def _watched(cursor: ChangeStreamCursor, db: str, coll: str | None) -> bool:
    if cursor.db is None:
        return db not in _INTERNAL_DATABASES
    if db != cursor.db:
        return False
    return coll is None or cursor.coll is None or coll == cursor.coll


def _command_events(
    cursor: ChangeStreamCursor, db: str, o: dict[str, Any], base: dict[str, Any]
) -> list[dict[str, Any]]:
    if "drop" in o and (cursor.coll is None or o["drop"] == cursor.coll):
        events = [base | {"operationType": "drop", "ns": {"db": db, "coll": o["drop"]}}]
        if cursor.coll is not None:
            cursor.invalidated = True
            events.append(_invalidate(base))
        return events
    if "renameCollection" in o:
        source_db, _, source = o["renameCollection"].partition(".")
        target_db, _, target = o["to"].partition(".")
        if cursor.coll is not None and source != cursor.coll:
            return []
        rename = base | {"operationType": "rename", "ns": {"db": source_db, "coll": source},
                         "to": {"db": target_db, "coll": target}}  # fmt: skip
        if cursor.show_expanded:
            rename["operationDescription"] = {"to": rename["to"], "dropTarget": o["dropTarget"]}
        if cursor.coll is None:
            return [rename]
        cursor.invalidated = True  # a collection's stream ends with its name
        return [rename, _invalidate(base)]
    expanded = _expanded_event(o)
    if expanded is not None and cursor.show_expanded:
        coll, event = expanded
        if cursor.coll is None or coll == cursor.coll:
            return [base | {"ns": {"db": db, "coll": coll}} | event]
        return []
    if "dropDatabase" in o:
        events = [base | {"operationType": "dropDatabase", "ns": {"db": db}}]
        if cursor.db is not None:
            cursor.invalidated = True
            events.append(_invalidate(base))
        return events
    return []


def _invalidate(base: dict[str, Any]) -> dict[str, Any]:
    """The event that ends a collection's or database's stream, after its drop."""
    token = {"_data": base["_id"]["_data"] + _FROM_INVALIDATE}
    return base | {"_id": token, "operationType": "invalidate"}


def _expanded_event(o: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """(collection, event fields) of a catalog change shown only with showExpandedEvents."""
    if "create" in o:
        description: dict[str, Any] = {k: o[k] for k in ("viewOn", "pipeline") if k in o}
        if not description:
            description = {"idIndex": {"v": 2, "key": {"_id": 1}, "name": "_id_"}}
        return o["create"], {"operationType": "create", "operationDescription": description}
    if "createIndexes" in o:
        spec = {k: v for k, v in o.items() if k != "createIndexes"}
        return o["createIndexes"], {"operationType": "createIndexes",
                                    "operationDescription": {"indexes": [spec]}}  # fmt: skip
    if "dropIndexes" in o:
        dropped = {"indexes": [{"name": o["index"]}]}
        return o["dropIndexes"], {"operationType": "dropIndexes", "operationDescription": dropped}
    if "collMod" in o:
        changed = {k: v for k, v in o.items() if k != "collMod"}
        return o["collMod"], {"operationType": "modify", "operationDescription": changed}
    return None
