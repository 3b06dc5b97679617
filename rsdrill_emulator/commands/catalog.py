"""Databases, collections and indexes: list, create, modify, rename, drop."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from bson.binary import Binary

from rsdrill_emulator import (
    indexes,
    pipeline,
    query,
    validation,
)
from rsdrill_emulator.commands.base import (
    _GENERIC_FIELDS,
    Request,
    _admin_only,
    _ns,
)
from rsdrill_emulator.commands.dispatcher import command
from rsdrill_emulator.commands.documents import _refuse_view
from rsdrill_emulator.datastore import id_key
from rsdrill_emulator.errors import (
    CommandError,
)
from rsdrill_emulator.node import Node

if TYPE_CHECKING:
    from rsdrill_emulator.commands.dispatcher import Commands


@command("listDatabases")
async def _list_databases(cmds: Commands, req: Request) -> dict[str, Any]:
    store = cmds.node.store
    dbs = [{"name": db, "sizeOnDisk": 0.0, "empty": False} for db in store.databases()]
    if req.body.get("nameOnly"):
        dbs = [{"name": d["name"]} for d in dbs]
    return {"databases": dbs, "totalSize": 0.0}


@command("listCollections")
async def _list_collections(cmds: Commands, req: Request) -> dict[str, Any]:
    prefix = req.db + "."
    names = [ns[len(prefix) :] for ns in cmds.node.store.namespaces() if ns.startswith(prefix)]
    infos = [_collection_info(cmds.node, req.db, n) for n in names]
    filt = req.body.get("filter") or {}
    infos = [i for i in infos if query.matches(i, filt)]
    if req.body.get("nameOnly"):
        infos = [{"name": i["name"], "type": i["type"]} for i in infos]
    return cmds.open_cursor(f"{req.db}.$cmd.listCollections", infos, None)


def _collection_info(node: Node, db: str, name: str) -> dict[str, Any]:
    view = node.store.view(f"{db}.{name}")
    if view is not None:
        return {"name": name, "type": "view", "options": view, "info": {"readOnly": True}}
    return {
        "name": name,
        "type": "collection",
        "options": dict(node.store.options(f"{db}.{name}")),
        "info": {"readOnly": False, **_uuid_info(node.store.uuid_of(f"{db}.{name}"))},
        "idIndex": {"v": 2, "key": {"_id": 1}, "name": "_id_"},
    }


def _uuid_info(ui: uuid.UUID | None) -> dict[str, Any]:
    return {} if ui is None else {"uuid": Binary.from_uuid(ui)}


@command("listIndexes")
async def _list_indexes(cmds: Commands, req: Request) -> dict[str, Any]:
    ns = _ns(req)
    if not cmds.node.store.exists(ns):
        raise CommandError(26, f"ns does not exist: {ns}")
    specs = [indexes.ID_INDEX, *cmds.node.store.indexes(ns)]
    batch = (req.body.get("cursor") or {}).get("batchSize")
    return cmds.open_cursor(ns, specs, int(batch) if batch is not None else None)


@command("create")
async def _create(cmds: Commands, req: Request) -> dict[str, Any]:
    ns = _ns(req)
    cmds.node.require_writable()
    if cmds.node.store.exists(ns):
        raise CommandError(48, f"Collection {ns} already exists.")
    o: dict[str, Any] = {"create": req.body["create"]}
    if "viewOn" in req.body:
        view_on, stages = req.body["viewOn"], req.body.get("pipeline", [])
        if not isinstance(view_on, str) or not view_on:
            raise CommandError(2, "'viewOn' must be a non-empty string")
        for name, _ in pipeline.parse_pipeline(stages):
            if name in pipeline.OUTPUT_STAGES or name == "$changeStream":
                raise CommandError(2, f"{name} cannot be used in a view definition")
        o |= {"viewOn": view_on, "pipeline": stages}
    if "changeStreamPreAndPostImages" in req.body:
        o["changeStreamPreAndPostImages"] = _pre_and_post_images(req.body)
    o |= validation.options_of(req.body)
    optime = cmds.node.write("c", f"{req.db}.$cmd", o)
    return await cmds.finish_write(req, {}, optime)


def _pre_and_post_images(body: dict[str, Any]) -> dict[str, bool]:
    setting = body["changeStreamPreAndPostImages"]
    if (
        not isinstance(setting, dict)
        or set(setting) != {"enabled"}
        or not isinstance(setting["enabled"], bool)
    ):
        raise CommandError(2, "changeStreamPreAndPostImages must be {enabled: true|false}")
    return {"enabled": setting["enabled"]}


@command("collMod")
async def _coll_mod(cmds: Commands, req: Request) -> dict[str, Any]:
    """collMod's changeStreamPreAndPostImages and validation options; other options are
    refused by name, not ignored."""
    ns = _ns(req)
    node = cmds.node
    node.require_writable()
    if not node.store.exists(ns) or node.store.view(ns) is not None:
        raise CommandError(26, f"ns does not exist: {ns}")
    known = {"collMod", "changeStreamPreAndPostImages", *validation.OPTIONS}
    unknown = sorted(set(req.body) - known - _GENERIC_FIELDS)
    if unknown:
        raise CommandError(72, f"collMod option {unknown[0]!r} is not supported by the sandbox")
    o: dict[str, Any] = {"collMod": req.body["collMod"]}
    if "changeStreamPreAndPostImages" in req.body:
        o["changeStreamPreAndPostImages"] = _pre_and_post_images(req.body)
    o |= validation.options_of(req.body)
    optime = node.write("c", f"{req.db}.$cmd", o)
    return await cmds.finish_write(req, {}, optime)


@command("drop")
async def _drop(cmds: Commands, req: Request) -> dict[str, Any]:
    ns = _ns(req)
    cmds.node.require_writable()
    if not cmds.node.store.exists(ns):
        return {"ns": ns}
    was = 1 + len(cmds.node.store.indexes(ns))
    optime = cmds.node.write("c", f"{req.db}.$cmd", {"drop": req.body["drop"]})
    return await cmds.finish_write(req, {"ns": ns, "nIndexesWas": was}, optime)


@command("renameCollection")
async def _rename_collection(cmds: Commands, req: Request) -> dict[str, Any]:
    """renameCollection (admin): `renameCollection: "db.from", to: "db.to"`, `dropTarget`."""
    _admin_only(req)
    node = cmds.node
    node.require_writable()
    names: list[str] = []
    for name in ("renameCollection", "to"):
        value = req.body.get(name)
        if not isinstance(value, str) or "." not in value.strip(".") or value.endswith("."):
            raise CommandError(73, f"Invalid {name} namespace: {value!r}")
        names.append(value)
    source, target = names
    if source == target:
        raise CommandError(20, "Can't rename a collection to itself")
    if not node.store.exists(source):
        raise CommandError(26, f"Source collection {source} does not exist")
    _refuse_view(node, source)
    drop_target = bool(req.body.get("dropTarget"))
    if node.store.exists(target):
        if not drop_target:
            raise CommandError(48, "target namespace exists")
        _refuse_view(node, target)
    source_db = source.split(".", 1)[0]
    o = {"renameCollection": source, "to": target, "stayTemp": False, "dropTarget": drop_target}
    optime = node.write("c", f"{source_db}.$cmd", o)
    return await cmds.finish_write(req, {}, optime)


@command("dropDatabase")
async def _drop_database(cmds: Commands, req: Request) -> dict[str, Any]:
    node = cmds.node
    node.require_writable()
    # As mongod (4.2+): each collection's drop is an entry of its own (so streams see a drop
    # event per collection), then the database's, which takes the views with it.
    prefix = f"{req.db}."
    namespaces = [ns for ns in node.store.namespaces() if ns.startswith(prefix)]
    if not namespaces:  # as mongod: a database that does not exist is not dropped (no entry)
        return {}
    for ns in namespaces:
        name = ns[len(prefix) :]
        if not name.startswith("system.") and not node.store.view(ns):
            node.write("c", f"{req.db}.$cmd", {"drop": name})
    optime = node.write("c", f"{req.db}.$cmd", {"dropDatabase": 1})
    return await cmds.finish_write(req, {"dropped": req.db}, optime)


@command("createIndexes")
async def _create_indexes(cmds: Commands, req: Request) -> dict[str, Any]:
    """Record each new index (replicated as mongod logs it); a unique one is built, that is
    checked against the documents already there."""
    ns = _ns(req)
    node = cmds.node
    node.require_writable()
    _refuse_view(node, ns)
    specs = req.body.get("indexes")
    if not isinstance(specs, list) or not specs:
        raise CommandError(2, "Must specify at least one index to create")
    parsed = [indexes.parse_spec(spec) for spec in specs]
    created = not node.store.exists(ns)
    optime = None
    if created:
        optime = node.write("c", f"{req.db}.$cmd", {"create": req.body["createIndexes"]})
    before = 1 + len(node.store.indexes(ns))
    for spec in parsed:
        if spec["name"] == "_id_" or dict(spec["key"]) == {"_id": 1}:
            continue
        existing = next((i for i in node.store.indexes(ns) if i["name"] == spec["name"]), None)
        if existing is not None and indexes.same_index(existing, spec):
            continue
        if existing is not None:
            raise CommandError(86, f"An existing index has the same name as the requested "
                                   f"index but different options: {spec['name']}")  # fmt: skip
        if any(indexes.same_index(i, spec) for i in node.store.indexes(ns)):
            raise CommandError(85, f"Index already exists with a different name: {spec['name']}")
        indexes.build_check(ns, spec, node.store.documents(ns), id_key)
        optime = node.write("c", f"{req.db}.$cmd", {"createIndexes": req.body["createIndexes"],
                                                    **spec})  # fmt: skip
    reply: dict[str, Any] = {
        "createdCollectionAutomatically": created,
        "numIndexesBefore": before,
        "numIndexesAfter": 1 + len(node.store.indexes(ns)),
    }
    if reply["numIndexesAfter"] == before:
        reply["note"] = "all indexes already exist"
    return await cmds.finish_write(req, reply, optime)


@command("dropIndexes", "deleteIndexes")
async def _drop_indexes(cmds: Commands, req: Request) -> dict[str, Any]:
    """Drop one index (by name or key pattern), several (a list of names) or all (`*`)."""
    ns = _ns(req)
    node = cmds.node
    node.require_writable()
    if not node.store.exists(ns):
        raise CommandError(26, f"ns not found {ns}")
    which = req.body.get("index")
    current = node.store.indexes(ns)
    if which == "*":
        names = [i["name"] for i in current]
    elif isinstance(which, dict):
        names = [i["name"] for i in current if dict(i["key"]) == dict(which)]
        if not names:
            raise CommandError(27, f"can't find index with key: {which}")
    elif isinstance(which, str | list):
        names = [which] if isinstance(which, str) else list(which)
        known = {i["name"] for i in current}
        if "_id_" in names:
            raise CommandError(72, "cannot drop _id index")
        missing = [name for name in names if name not in known]
        if missing:
            raise CommandError(27, f"index not found with name [{missing[0]}]")
    else:
        raise CommandError(14, "dropIndexes 'index' must be a string, an object or an array")
    was = 1 + len(current)
    optime = None
    for name in names:
        optime = node.write("c", f"{req.db}.$cmd", {"dropIndexes": req.body["dropIndexes"],
                                                    "index": name})  # fmt: skip
    return await cmds.finish_write(req, {"nIndexesWas": was}, optime)
