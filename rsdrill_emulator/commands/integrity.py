"""dbHash: what MongoDB's own test runner compares across members after every fault.

As mongod computes it: per collection, the MD5 of its documents' BSON as stored, in `_id` order
(the `_id` index's, BSON comparison order); for the database, the MD5 of the collections'
hex digests in name order. Collections that are not replicated (the `local` database's) and
views are left out. The emulator keeps no collection UUIDs: `uuids` is empty.
"""

from __future__ import annotations

import hashlib
import time
from functools import cmp_to_key
from typing import TYPE_CHECKING, Any

import bson

from rsdrill_emulator import values
from rsdrill_emulator.commands.base import Request, command
from rsdrill_emulator.errors import CommandError

if TYPE_CHECKING:
    from rsdrill_emulator.commands.dispatcher import Commands
    from rsdrill_emulator.datastore import DataStore

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
        "uuids": {},
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
