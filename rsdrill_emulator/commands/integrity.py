"""dbHash and validate: what MongoDB's own test runner checks on every member after a fault.

As mongod computes it: per collection, the MD5 of its documents' BSON as stored, in `_id` order
(the `_id` index's, BSON comparison order); for the database, the MD5 of the collections'
hex digests in name order. Collections that are not replicated (the `local` database's) and
views are left out; `uuids` names each collection's UUID (the same on every member).

validate reads every stored document of a collection, as mongod's does: a record that is not a
whole BSON document is corrupt, one without `_id` or whose `_id` is not the key the `_id`
index holds it under is invalid (its index entry is extra, the key it should have is missing).
"""

from __future__ import annotations

import hashlib
import time
from functools import cmp_to_key
from typing import TYPE_CHECKING, Any

import bson
from bson.binary import Binary
from bson.errors import InvalidBSON

from rsdrill_emulator import values
from rsdrill_emulator.commands.base import Request
from rsdrill_emulator.commands.dispatcher import command
from rsdrill_emulator.datastore import id_key
from rsdrill_emulator.errors import CommandError

if TYPE_CHECKING:
    from rsdrill_emulator.commands.dispatcher import Commands
    from rsdrill_emulator.datastore import DataStore

# How many bad records a reply lists (mongod bounds its lists by size too).
_LISTED = 100

_ID_ORDER = cmp_to_key(values.compare)


@command("dbHash", "dbhash")
async def _db_hash(cmds: Commands, req: Request) -> dict[str, Any]:
    started = time.monotonic()
    wanted = req.body.get("collections")
    if wanted is not None and not (
        isinstance(wanted, list) and all(isinstance(name, str) for name in wanted)
    ):
        raise CommandError(2, "collections entries have to be strings")
    store = cmds.node.store
    prefix = f"{req.db}."
    names = sorted(
        ns[len(prefix) :]
        for ns in store.namespaces()
        if ns.startswith(prefix) and req.db != "local" and store.view(ns) is None
    )
    if wanted is not None:
        names = [name for name in names if name in wanted]
    hashes = {name: collection_hash(store, prefix + name) for name in names}
    whole = hashlib.md5(usedforsecurity=False)
    for digest in hashes.values():
        whole.update(digest.encode())
    return {
        "host": cmds.node.me.host,
        "collections": hashes,
        "capped": [],
        "uuids": {
            name: Binary.from_uuid(ui) for name in names if (ui := store.uuid_of(prefix + name))
        },
        "md5": whole.hexdigest(),
        "timeMillis": int((time.monotonic() - started) * 1000),
    }


def collection_hash(store: DataStore, ns: str) -> str:
    """The MD5 hex digest of the collection's documents, as stored, in `_id` order."""
    raw = store.raw_documents(ns)
    ids = [bson.decode(doc)["_id"] for doc in raw]
    order = sorted(range(len(raw)), key=lambda i: _ID_ORDER(ids[i]))
    digest = hashlib.md5(usedforsecurity=False)
    for i in order:
        digest.update(raw[i])
    return digest.hexdigest()


@command("validate")
async def _validate(cmds: Commands, req: Request) -> dict[str, Any]:
    name = req.body.get("validate")
    if not isinstance(name, str) or not name:
        raise CommandError(2, "collection name has to be a non-empty string")
    ns = f"{req.db}.{name}"
    store = cmds.node.store
    if not store.exists(ns):
        raise CommandError(26, f"Collection '{ns}' does not exist to validate.")
    if store.view(ns) is not None:
        raise CommandError(166, "Cannot validate a view")
    rows = store.keyed_documents(ns)
    errors: list[str] = []
    corrupt: list[int] = []
    extra: list[dict[str, Any]] = []
    missing: list[dict[str, Any]] = []
    invalid = 0
    for record, (key, raw) in enumerate(rows):
        try:
            doc = bson.decode(raw)
        except (InvalidBSON, IndexError, ValueError):
            corrupt.append(record)
            continue
        if "_id" not in doc:
            invalid += 1
            extra.append({"indexName": "_id_", "recordId": record})
        elif id_key(doc["_id"]) != key:
            invalid += 1
            extra.append({"indexName": "_id_", "recordId": record})
            missing.append({"indexName": "_id_", "recordId": record, "idKey": {"_id": doc["_id"]}})
    if corrupt:
        errors.append(f"Detected {len(corrupt)} corrupt records in collection {ns}")
    if invalid:
        errors.append(f"Detected {invalid} documents whose _id_ index entry is inconsistent")
    indexes = ["_id_", *(spec["name"] for spec in store.indexes(ns))]
    return {
        "ns": ns,
        "nInvalidDocuments": invalid,
        "nNonCompliantDocuments": 0,
        "nrecords": len(rows),
        "nIndexes": len(indexes),
        "keysPerIndex": dict.fromkeys(indexes, len(rows)),
        "indexDetails": {name: {"valid": not invalid} for name in indexes},
        "valid": not errors,
        "repaired": False,
        "warnings": [],
        "errors": errors,
        "extraIndexEntries": extra[:_LISTED],
        "missingIndexEntries": missing[:_LISTED],
        "corruptRecords": corrupt[:_LISTED],
    }
