"""insert, update, findAndModify and delete, with MongoDB's write errors."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bson.objectid import ObjectId

from rsdrill_emulator import (
    expressions,
    pipeline,
    query,
    updatediff,
    validation,
)
from rsdrill_emulator.commands.base import Request, _ns, _stmt_id
from rsdrill_emulator.commands.dispatcher import command
from rsdrill_emulator.commands.documents import _check_unique, _matching, _refuse_view
from rsdrill_emulator.errors import (
    CommandError,
)
from rsdrill_emulator.node import Node
from rsdrill_emulator.oplog import OpTime
from rsdrill_emulator.projection import project
from rsdrill_emulator.updates import upsert_seed

if TYPE_CHECKING:
    from rsdrill_emulator.commands.dispatcher import Commands


@command("insert")
async def _insert(cmds: Commands, req: Request) -> dict[str, Any]:
    node = cmds.node
    ns = _ns(req)
    docs = req.body.get("documents") or []
    ordered = req.body.get("ordered", True)
    session = cmds.session_of(req)
    node.require_writable()
    _refuse_view(node, ns)
    n, errors, optime = 0, [], None
    for i, doc in enumerate(docs):
        cmds.opcounters["insert"] += 1
        stmt = _stmt_id(req, i)
        if cmds.done_before(session, stmt) is not None:
            n += 1
            continue
        if "_id" not in doc:
            doc = {"_id": ObjectId(), **doc}
        error = _insert_error(node, ns, doc, bool(req.body.get("bypassDocumentValidation")))
        if error is not None:
            errors.append({"index": i, **error})
            if ordered:
                break
            continue
        optime = node.write("i", ns, doc, session=cmds.session_fields(session, stmt, {"n": 1}))
        n += 1
    reply: dict[str, Any] = {"n": n}
    if errors:
        reply["writeErrors"] = errors
    return await cmds.finish_write(req, reply, optime)


def _update_entry(
    old: dict[str, Any], new: dict[str, Any], update: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    """An update entry's `o` and `o2`, as mongod logs them: the diff from `old` to `new` (the
    document itself when the update replaced it) and the document's `_id`."""
    replacement = not (isinstance(update, list) or (update and next(iter(update)).startswith("$")))
    return updatediff.update_entry(old, new, replacement), {"_id": old["_id"]}


def _insert_error(node: Node, ns: str, doc: dict[str, Any], bypass: bool) -> dict[str, Any] | None:
    """Why `doc` cannot be inserted (a write error's fields), or None."""
    doc_id = doc["_id"]
    if isinstance(doc_id, dict) and any(key.startswith("$") for key in doc_id):
        field = next(key for key in doc_id if key.startswith("$"))
        return {"code": 2, "errmsg": f"_id fields may not contain '$'-prefixed fields: {field} "
                                     "is not valid for storage."}  # fmt: skip
    if node.store.get(ns, doc_id) is not None:
        return {
            "code": 11000,
            "errmsg": f"E11000 duplicate key error collection: {ns} index: _id_ dup key: "
            f"{{ _id: {doc_id!r} }}",
            "keyPattern": {"_id": 1},
            "keyValue": {"_id": doc_id},
        }
    try:
        _check_document(node, ns, doc, bypass=bypass)
    except query.QueryError as exc:
        return {"code": exc.code, "errmsg": str(exc), **exc.details}
    return None


def _check_document(
    node: Node,
    ns: str,
    new: dict[str, Any],
    old: dict[str, Any] | None = None,
    *,
    bypass: bool = False,
) -> None:
    """A document about to be written (replacing `old`): the collection's validator, unless
    the command bypasses it, then its unique indexes; a QueryError if either refuses it."""
    if not bypass and (error := validation.failure(node.store.options(ns), new, old)):
        raise error
    _check_unique(node, ns, new)


def _write_error(index: int, exc: query.QueryError) -> dict[str, Any]:
    """A refused statement's entry in a write reply's `writeErrors`."""
    return {"index": index, "code": exc.code, "errmsg": str(exc)} | exc.details


@command("update")
async def _update(cmds: Commands, req: Request) -> dict[str, Any]:
    node = cmds.node
    ns = _ns(req)
    session = cmds.session_of(req)
    ordered = req.body.get("ordered", True)
    node.require_writable()
    _refuse_view(node, ns)
    variables = expressions.evaluate_let(req.body.get("let"))
    bypass = bool(req.body.get("bypassDocumentValidation"))
    if any(isinstance(spec, dict) and "sort" in spec for spec in req.body.get("updates") or []):
        # An update's sort came with MongoDB 8.0; 7.0 refuses the command as it parses it.
        raise CommandError(40415, "BSON field 'update.updates.sort' is an unknown field.")
    matched = modified = 0
    upserted: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    optime = None
    for i, spec in enumerate(req.body.get("updates") or []):
        cmds.opcounters["update"] += 1
        stmt = _stmt_id(req, i)
        previous = cmds.done_before(session, stmt)
        if previous is not None:
            matched += previous["n"] - (1 if "upserted" in previous else 0)
            modified += previous["nModified"]
            if "upserted" in previous:
                upserted.append({"index": i, "_id": previous["upserted"]})
            continue
        try:
            result, wrote = _update_one_spec(cmds, ns, spec, session, stmt, variables, bypass)
        except query.QueryError as exc:
            errors.append(_write_error(i, exc))
            if ordered:
                break
            continue
        optime = wrote or optime
        matched += result["n"] - (1 if "upserted" in result else 0)
        modified += result["nModified"]
        if "upserted" in result:
            upserted.append({"index": i, "_id": result["upserted"]})
    reply: dict[str, Any] = {"n": matched + len(upserted), "nModified": modified}
    if upserted:
        reply["upserted"] = upserted
    if errors:
        reply["writeErrors"] = errors
    return await cmds.finish_write(req, reply, optime)


def _update_one_spec(
    cmds: Commands,
    ns: str,
    spec: dict[str, Any],
    session: Any,
    stmt: int,
    variables: dict[str, Any],
    bypass: bool,
) -> tuple[dict[str, Any], OpTime | None]:
    node = cmds.node
    q, u = spec.get("q") or {}, spec.get("u") or {}
    array_filters = spec.get("arrayFilters")
    targets = _matching(node, ns, q, variables, spec.get("collation"))
    if not spec.get("multi"):
        targets = targets[:1]
    optime = None
    if not targets and spec.get("upsert"):
        doc = pipeline.update_document(
            upsert_seed(q),
            u,
            inserting=True,
            array_filters=array_filters,
            variables=variables,
        )
        if "_id" not in doc:
            doc = {"_id": ObjectId(), **doc}
        result = {"n": 1, "nModified": 0, "upserted": doc["_id"]}
        _check_document(node, ns, doc, bypass=bypass)
        optime = node.write("i", ns, doc, session=cmds.session_fields(session, stmt, result))
        return result, optime
    changed = 0
    for old in targets:
        new = pipeline.update_document(old, u, array_filters=array_filters, variables=variables)
        if new.get("_id") != old.get("_id"):
            raise query.QueryError(
                66, "Performing an update on the path '_id' would modify the immutable field '_id'"
            )
        if new != old or list(new) != list(old):
            _check_document(node, ns, new, old, bypass=bypass)
            changed += 1
            result = {"n": 1, "nModified": 1}
            o, o2 = _update_entry(old, new, u)
            optime = node.write(
                "u", ns, o, o2=o2, session=cmds.session_fields(session, stmt, result)
            )
    result = {"n": len(targets), "nModified": changed}
    if session is not None and changed == 0:
        # Nothing changed, but a retry must still find this statement done, on any member.
        optime = node.write(
            "n", "", {"msg": "retryable write"}, session=cmds.session_fields(session, stmt, result)
        )
    return result, optime


@command("findAndModify", "findandmodify")
async def _find_and_modify(cmds: Commands, req: Request) -> dict[str, Any]:
    """One document found (by query and sort), removed or updated, and returned as it was or
    (`new`) as it became; retryable like the other writes."""
    node = cmds.node
    body = req.body
    ns = _ns(req)
    session = cmds.session_of(req)
    node.require_writable()
    _refuse_view(node, ns)
    remove, update = bool(body.get("remove")), body.get("update")
    if remove == (update is not None):
        raise CommandError(9, "Either an update or remove=true must be specified")
    if remove and (body.get("new") or body.get("upsert")):
        raise CommandError(9, "Cannot specify new or upsert with remove=true")
    cmds.opcounters["delete" if remove else "update"] += 1
    previous = cmds.done_before(session, 0)
    if previous is not None:
        return await cmds.finish_write(req, dict(previous), None)
    q = body.get("query") or {}
    variables = expressions.evaluate_let(body.get("let"))
    array_filters = body.get("arrayFilters")
    bypass = bool(body.get("bypassDocumentValidation"))
    found = _matching(node, ns, q, variables, body.get("collation"), body.get("sort"))
    target = found[0] if found else None
    fields = body.get("fields")

    def shown(doc: dict[str, Any] | None) -> dict[str, Any] | None:
        return project(doc, fields) if doc is not None and fields else doc

    optime = None
    if remove:
        reply: dict[str, Any] = {"lastErrorObject": {"n": int(target is not None)},
                                 "value": shown(target)}  # fmt: skip
        if target is not None:
            optime = node.write("d", ns, {"_id": target["_id"]},
                                session=cmds.session_fields(session, 0, reply))  # fmt: skip
    elif target is None and body.get("upsert"):
        assert update is not None  # given unless remove, checked above
        doc = pipeline.update_document(
            upsert_seed(q),
            update,
            inserting=True,
            array_filters=array_filters,
            variables=variables,
        )
        if "_id" not in doc:
            doc = {"_id": ObjectId(), **doc}
        reply = {"lastErrorObject": {"n": 1, "updatedExisting": False, "upserted": doc["_id"]},
                 "value": shown(doc) if body.get("new") else None}  # fmt: skip
        _check_document(node, ns, doc, bypass=bypass)
        optime = node.write("i", ns, doc, session=cmds.session_fields(session, 0, reply))
    elif target is None:
        reply = {"lastErrorObject": {"n": 0, "updatedExisting": False}, "value": None}
    else:
        assert update is not None  # given unless remove, checked above
        new = pipeline.update_document(
            target, update, array_filters=array_filters, variables=variables
        )
        reply = {"lastErrorObject": {"n": 1, "updatedExisting": True},
                 "value": shown(new if body.get("new") else target)}  # fmt: skip
        if new != target or list(new) != list(target):
            _check_document(node, ns, new, target, bypass=bypass)
            o, o2 = _update_entry(target, new, update)
            optime = node.write("u", ns, o, o2=o2, session=cmds.session_fields(session, 0, reply))
    if optime is None and session is not None:
        # Nothing written, but a retry must find this statement done, on any member.
        optime = node.write("n", "", {"msg": "retryable write"},
                            session=cmds.session_fields(session, 0, reply))  # fmt: skip
    return await cmds.finish_write(req, reply, optime)


@command("distinct")
async def _distinct(cmds: Commands, req: Request) -> dict[str, Any]:
    cmds.check_readable(req)
    await cmds.majority_read_barrier(req)
    key = req.body.get("key")
    if not isinstance(key, str) or not key:
        raise CommandError(14, "distinct: key must be a string")
    docs = _matching(
        cmds.node, _ns(req), req.body.get("query") or {}, collation=req.body.get("collation")
    )
    return {"values": query.distinct_values(docs, key)}


@command("delete")
async def _delete(cmds: Commands, req: Request) -> dict[str, Any]:
    node = cmds.node
    ns = _ns(req)
    session = cmds.session_of(req)
    node.require_writable()
    _refuse_view(node, ns)
    n, optime = 0, None
    ordered = req.body.get("ordered", True)
    errors: list[dict[str, Any]] = []
    variables = expressions.evaluate_let(req.body.get("let"))
    for i, spec in enumerate(req.body.get("deletes") or []):
        cmds.opcounters["delete"] += 1
        stmt = _stmt_id(req, i)
        previous = cmds.done_before(session, stmt)
        if previous is not None:
            n += previous["n"]
            continue
        try:
            targets = _matching(node, ns, spec.get("q") or {}, variables, spec.get("collation"))
        except query.QueryError as exc:  # a statement's error, as update's: the reply is ok
            errors.append(_write_error(i, exc))
            if ordered:
                break
            continue
        if spec.get("limit", 0) == 1:
            targets = targets[:1]
        for doc in targets:
            optime = node.write(
                "d", ns, {"_id": doc["_id"]}, session=cmds.session_fields(session, stmt, {"n": 1})
            )
        if session is not None and not targets:
            optime = node.write(
                "n",
                "",
                {"msg": "retryable write"},
                session=cmds.session_fields(session, stmt, {"n": 0}),
            )
        n += len(targets)
    reply: dict[str, Any] = {"n": n}
    if errors:
        reply["writeErrors"] = errors
    return await cmds.finish_write(req, reply, optime)
