"""The documents a member holds, and how oplog entries change them.

Also the session table for retryable writes: an entry carrying `lsid`/`txnNumber`/`stmtId`
records that statement's result wherever the entry is applied, so the dedupe record replicates
with the write and a retry on a new primary is answered instead of applied again.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import bson
from bson.objectid import ObjectId


def id_key(value: Any) -> Any:
    """A hashable key for an `_id` value; equal numbers of any type share a key, as in MongoDB.

    Python already hashes 1, 1.0 and Int64(1) alike; only bools (equal to 0 and 1 in Python,
    not in MongoDB) and unhashable documents and arrays need wrapping.
    """
    kind = type(value)
    if kind is ObjectId or kind is str or kind is int:
        return value
    if kind is bool:
        return ("bool", value)
    try:
        hash(value)
    except TypeError:
        return ("bson", bson.encode({"v": value}))
    return value


def session_key(lsid: dict[str, Any]) -> bytes:
    return bson.encode({"id": lsid.get("id"), "uid": lsid.get("uid")})


@dataclass
class SessionRecord:
    """The newest transaction number of one session and its executed statements' results."""

    txn_number: int
    results: dict[int, dict[str, Any]] = field(default_factory=dict)


class DataStore:
    """Collections by namespace (`db.coll`), each an insertion-ordered map of `_id` to document."""

    def __init__(self) -> None:
        self.collections: dict[str, dict[Any, dict[str, Any]]] = {}
        self.sessions: dict[bytes, SessionRecord] = {}

    # -- reading ---------------------------------------------------------------------------

    def documents(self, ns: str) -> Iterator[dict[str, Any]]:
        return iter(list(self.collections.get(ns, {}).values()))

    def get(self, ns: str, doc_id: Any) -> dict[str, Any] | None:
        return self.collections.get(ns, {}).get(id_key(doc_id))

    def namespaces(self) -> list[str]:
        return list(self.collections)

    def databases(self) -> list[str]:
        return sorted({ns.split(".", 1)[0] for ns in self.collections})

    def approx_size(self, ns: str | None = None) -> int:
        """Bytes of BSON the documents take (computed, so use sparingly)."""
        names = [ns] if ns is not None else list(self.collections)
        return sum(
            len(bson.encode(doc)) for n in names for doc in self.collections.get(n, {}).values()
        )

    # -- changing --------------------------------------------------------------------------

    def create(self, ns: str) -> None:
        self.collections.setdefault(ns, {})

    def put(self, ns: str, doc: dict[str, Any]) -> None:
        self.collections.setdefault(ns, {})[id_key(doc["_id"])] = doc

    def remove(self, ns: str, doc_id: Any) -> None:
        self.collections.get(ns, {}).pop(id_key(doc_id), None)

    def drop(self, ns: str) -> None:
        self.collections.pop(ns, None)

    def drop_database(self, db: str) -> None:
        for ns in [n for n in self.collections if n.split(".", 1)[0] == db]:
            del self.collections[ns]

    def clear(self) -> None:
        self.collections.clear()
        self.sessions.clear()

    def apply(self, entry: dict[str, Any]) -> None:
        """Apply one oplog entry; applying it again changes nothing."""
        op = entry["op"]
        ns = entry["ns"]
        if op in ("i", "u"):
            self.put(ns, entry["o"])
        elif op == "d":
            self.remove(ns, entry["o"]["_id"])
        elif op == "c":
            self._apply_command(ns.split(".", 1)[0], entry["o"])
        if "txnNumber" in entry:
            self.record_statement(
                entry["lsid"], int(entry["txnNumber"]), int(entry.get("stmtId", 0)), entry["res"]
            )

    def _apply_command(self, db: str, o: dict[str, Any]) -> None:
        if "create" in o:
            self.create(f"{db}.{o['create']}")
        elif "drop" in o:
            self.drop(f"{db}.{o['drop']}")
        elif "dropDatabase" in o:
            self.drop_database(db)

    # -- sessions --------------------------------------------------------------------------

    def session(self, lsid: dict[str, Any]) -> SessionRecord | None:
        return self.sessions.get(session_key(lsid))

    def record_statement(
        self, lsid: dict[str, Any], txn_number: int, stmt_id: int, result: dict[str, Any]
    ) -> None:
        key = session_key(lsid)
        record = self.sessions.get(key)
        if record is None or record.txn_number < txn_number:
            record = self.sessions[key] = SessionRecord(txn_number)
        if record.txn_number == txn_number:
            record.results[stmt_id] = result


def apply_all(store: DataStore, entries: Iterable[dict[str, Any]]) -> None:
    for entry in entries:
        store.apply(entry)
