"""The documents a member holds, and how oplog entries change them.

Also the session table for retryable writes: an entry carrying `lsid`/`txnNumber`/`stmtId`
records that statement's result wherever the entry is applied, so the dedupe record replicates
with the write and a retry on a new primary is answered instead of applied again.
"""

from __future__ import annotations

import uuid
from typing import Any

import bson
from bson.binary import Binary
from bson.codec_options import CodecOptions
from bson.raw_bson import RawBSONDocument

from rsdrill_emulator import updatediff, validation
from rsdrill_emulator.indexes import UniqueKeys
from rsdrill_emulator.storage import Database

_RAW = CodecOptions(document_class=RawBSONDocument)


def id_key(value: Any) -> bytes:
    """The stored key of an `_id`: equal numbers of any type share one, as in MongoDB."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = float(value)
    return bson.encode({"": value})


def _option_fields(o: dict[str, Any]) -> dict[str, Any]:
    """The collection options a create or collMod entry sets."""
    return {k: o[k] for k in ("changeStreamPreAndPostImages", *validation.OPTIONS) if k in o}


def session_key(lsid: dict[str, Any]) -> bytes:
    return bson.encode({"id": lsid.get("id"), "uid": lsid.get("uid")})


def collection_uuid(value: Any) -> uuid.UUID | None:
    """A collection UUID as it travels (BSON binary), or None for anything else."""
    return value.as_uuid() if isinstance(value, Binary) else None


def entry_uuid(entry: dict[str, Any]) -> uuid.UUID | None:
    """The collection UUID an oplog entry carries (`ui`), if it carries one."""
    return collection_uuid(entry.get("ui"))


class DataStore:
    """Collections by namespace (`db.coll`); documents in the order they were inserted."""

    def __init__(self, database: Database) -> None:
        self.database = database
        # Namespaces known to exist, so a write does not ask the database every time.
        self._created: set[str] = set(self.namespaces())
        # Sessions' newest transaction numbers, read through (a write asks for it per statement).
        self._txns: dict[bytes, int | None] = {}
        # The statements recorded under a session's newest transaction number, where known (all
        # written by this process since that number came): a retryable write per number, as
        # each insert_one is, then needs no delete of the previous number's statement.
        self._statements: dict[bytes, set[int]] = {}
        # Secondary index specifications by namespace, read through (every write asks).
        self._indexes: dict[str, list[dict[str, Any]]] = {}
        # View definitions ({viewOn, pipeline}) by namespace, read through; None: not a view.
        self._views: dict[str, dict[str, Any] | None] = {}
        # Unique indexes' keys by namespace, built when a write first asks, then kept current.
        self._unique: dict[str, list[UniqueKeys]] = {}
        # Collection options (changeStreamPreAndPostImages) by namespace, read through.
        self._options: dict[str, dict[str, Any]] = {}
        # Each collection's UUID, as mongod's catalog holds it: given by the primary that
        # created the collection and carried by the oplog (`ui`), so every member has the same.
        self._uuids: dict[str, uuid.UUID] = {
            ns: uuid.UUID(bytes=bytes(raw))
            for ns, raw in self.database.execute("SELECT ns, uuid FROM uuids")
        }

    # -- reading ---------------------------------------------------------------------------

    def documents(self, ns: str) -> list[dict[str, Any]]:
        return bson.decode_all(b"".join(self.raw_documents(ns)))

    def raw_documents(self, ns: str) -> list[bytes]:
        """The collection's documents as stored (BSON), in natural order."""
        rows = self.database.execute("SELECT doc FROM docs WHERE ns = ? ORDER BY rowid", (ns,))
        return [row[0] for row in rows]

    def keyed_documents(self, ns: str) -> list[tuple[bytes, bytes]]:
        """(the `_id` index's key, the document as stored) of every document (validate)."""
        rows = self.database.execute("SELECT k, doc FROM docs WHERE ns = ? ORDER BY rowid", (ns,))
        return [(bytes(row[0]), bytes(row[1])) for row in rows]

    def scan(self, ns: str, after_rowid: int, max_bytes: int) -> tuple[list[bytes], int, bool]:
        """Raw documents after a position, about max_bytes of them: (docs, position, done)."""
        out: list[bytes] = []
        total = 0
        position = after_rowid
        # A range of the table's rowid b-tree: by the (ns, _id) index SQLite would read and sort
        # the whole collection for every batch, blocking the source's loop for the lot.
        rows = self.database.execute(
            "SELECT rowid, doc FROM docs NOT INDEXED WHERE rowid > ? AND ns = ? ORDER BY rowid",
            (after_rowid, ns),
        )
        for rowid, doc in rows:
            if out and total + len(doc) > max_bytes:
                return out, position, False
            out.append(doc)
            total += len(doc)
            position = rowid
        return out, position, True

    def get(self, ns: str, doc_id: Any) -> dict[str, Any] | None:
        row = self.database.execute(
            "SELECT doc FROM docs WHERE ns = ? AND k = ?", (ns, id_key(doc_id))
        ).fetchone()
        return None if row is None else bson.decode(row[0])

    def count(self, ns: str) -> int:
        row = self.database.execute("SELECT COUNT(*) FROM docs WHERE ns = ?", (ns,)).fetchone()
        return int(row[0])

    def exists(self, ns: str) -> bool:
        return (
            self.database.execute("SELECT 1 FROM collections WHERE ns = ?", (ns,)).fetchone()
            is not None
        )

    def uuid_of(self, ns: str) -> uuid.UUID | None:
        """The collection's UUID; None for a view or a namespace that does not exist."""
        return self._uuids.get(ns)

    def namespaces(self) -> list[str]:
        return [row[0] for row in self.database.execute("SELECT ns FROM collections")]

    def databases(self) -> list[str]:
        return sorted({ns.split(".", 1)[0] for ns in self.namespaces()})

    def indexes(self, ns: str) -> list[dict[str, Any]]:
        """The collection's index specifications besides `_id_`, in creation order."""
        if ns not in self._indexes:
            rows = self.database.execute(
                "SELECT spec FROM indexes WHERE ns = ? ORDER BY rowid", (ns,)
            )
            self._indexes[ns] = [bson.decode(row[0]) for row in rows]
        return self._indexes[ns]

    def view(self, ns: str) -> dict[str, Any] | None:
        """A view's definition (`viewOn`, `pipeline`), or None for a collection."""
        if ns not in self._views:
            row = self.database.execute(
                "SELECT definition FROM views WHERE ns = ?", (ns,)
            ).fetchone()
            self._views[ns] = None if row is None else bson.decode(row[0])
        return self._views[ns]

    def options(self, ns: str) -> dict[str, Any]:
        """The collection's options set by `create` or `collMod` (empty when none)."""
        if ns not in self._options:
            row = self.database.execute("SELECT doc FROM options WHERE ns = ?", (ns,)).fetchone()
            self._options[ns] = {} if row is None else bson.decode(row[0])
        return self._options[ns]

    def images(self, term: int, secs: int, inc: int) -> tuple[Any, Any] | None:
        """(pre-image, post-image) of the update, replacement or delete logged at that oplog
        position, kept when its collection had changeStreamPreAndPostImages enabled; None
        when none was kept."""
        row = self.database.execute(
            "SELECT pre, post FROM images WHERE t = ? AND secs = ? AND inc = ?", (term, secs, inc)
        ).fetchone()
        if row is None:
            return None
        pre, post = row
        return (None if pre is None else bson.decode(pre),
                None if post is None else bson.decode(post))  # fmt: skip

    def unique_keys(self, ns: str) -> list[UniqueKeys]:
        """The keys of the collection's unique indexes (an empty list when it has none)."""
        if ns not in self._unique:
            unique = [UniqueKeys(ns, index) for index in self.indexes(ns) if index.get("unique")]
            for doc in self.documents(ns) if unique else []:
                for keys in unique:
                    keys.add(doc, id_key(doc["_id"]))
            self._unique[ns] = unique
        return self._unique[ns]

    def approx_size(self) -> int:
        """Bytes of BSON the documents take."""
        row = self.database.execute("SELECT COALESCE(SUM(LENGTH(doc)), 0) FROM docs").fetchone()
        return int(row[0])

    # -- changing --------------------------------------------------------------------------

    def create(self, ns: str, ui: uuid.UUID | None = None, *, view: bool = False) -> None:
        """Make the collection (or view) exist; a collection gets the UUID `ui` if it has none
        yet (a new one when none is given: an entry written before entries carried them)."""
        if ns not in self._created:
            self.database.write("INSERT OR IGNORE INTO collections (ns) VALUES (?)", (ns,))
            self._created.add(ns)
        if not view and ns not in self._uuids:
            self._set_uuid(ns, ui or uuid.uuid4())

    def _set_uuid(self, ns: str, ui: uuid.UUID) -> None:
        self.database.write("INSERT OR REPLACE INTO uuids (ns, uuid) VALUES (?, ?)", (ns, ui.bytes))
        self._uuids[ns] = ui

    def put(self, ns: str, doc: dict[str, Any]) -> None:
        """Insert or replace by `_id`; a replaced document keeps its place in natural order."""
        self.create(ns)
        key = id_key(doc["_id"])
        self.database.write(
            "INSERT INTO docs (ns, k, doc) VALUES (?, ?, ?) "
            "ON CONFLICT (ns, k) DO UPDATE SET doc = excluded.doc",
            (ns, key, bson.encode(doc)),
        )
        for keys in self._unique.get(ns, ()):
            keys.add(doc, key)

    def put_raw(self, ns: str, data: bytes) -> None:
        """Insert documents given as concatenated BSON (a clone batch) without re-encoding."""
        self.create(ns)
        self._unique.pop(ns, None)
        raw = bson.decode_all(data, _RAW)
        self.database.write_many(
            "INSERT INTO docs (ns, k, doc) VALUES (?, ?, ?) "
            "ON CONFLICT (ns, k) DO UPDATE SET doc = excluded.doc",
            [(ns, id_key(doc["_id"]), doc.raw) for doc in raw],
        )

    def remove(self, ns: str, doc_id: Any) -> None:
        key = id_key(doc_id)
        self.database.write("DELETE FROM docs WHERE ns = ? AND k = ?", (ns, key))
        for keys in self._unique.get(ns, ()):
            keys.remove(key)

    def create_view(self, ns: str, definition: dict[str, Any]) -> None:
        self.create(ns, view=True)
        self.database.write(
            "INSERT OR REPLACE INTO views (ns, definition) VALUES (?, ?)",
            (ns, bson.encode(definition)),
        )
        self._views.pop(ns, None)

    def add_index(self, ns: str, spec: dict[str, Any]) -> None:
        self.create(ns)
        self.database.write(
            "INSERT OR REPLACE INTO indexes (ns, name, spec) VALUES (?, ?, ?)",
            (ns, spec["name"], bson.encode(spec)),
        )
        self._indexes.pop(ns, None)
        self._unique.pop(ns, None)

    def drop_index(self, ns: str, name: str) -> None:
        self.database.write("DELETE FROM indexes WHERE ns = ? AND name = ?", (ns, name))
        self._indexes.pop(ns, None)
        self._unique.pop(ns, None)

    def set_options(self, ns: str, options: dict[str, Any]) -> None:
        self.database.write(
            "INSERT OR REPLACE INTO options (ns, doc) VALUES (?, ?)", (ns, bson.encode(options))
        )
        self._options[ns] = dict(options)

    def expire_images(self, term: int, secs: int, inc: int) -> None:
        """Forget the images of entries before this position (the oplog's oldest): as mongod
        expires pre-images with the oplog, no stream can be resumed from before it."""
        self.database.write(
            "DELETE FROM images WHERE (t, secs, inc) < (?, ?, ?)", (term, secs, inc)
        )

    def drop(self, ns: str) -> None:
        self.database.write("DELETE FROM indexes WHERE ns = ?", (ns,))
        self.database.write("DELETE FROM options WHERE ns = ?", (ns,))
        self._options.pop(ns, None)
        self.database.write("DELETE FROM views WHERE ns = ?", (ns,))
        self._indexes.pop(ns, None)
        self._views.pop(ns, None)
        self._unique.pop(ns, None)
        self.database.write("DELETE FROM docs WHERE ns = ?", (ns,))
        self.database.write("DELETE FROM collections WHERE ns = ?", (ns,))
        self._created.discard(ns)
        self.database.write("DELETE FROM uuids WHERE ns = ?", (ns,))
        self._uuids.pop(ns, None)

    def rename(self, source: str, target: str, *, drop_target: bool) -> None:
        """Move a collection, its documents, indexes and options, to another namespace."""
        if drop_target:
            self.drop(target)
        # The collection keeps its UUID, as mongod's rename within a database does.
        self.create(target, self._uuids.get(source))
        for table in ("docs", "indexes", "options"):
            self.database.write(f"UPDATE {table} SET ns = ? WHERE ns = ?", (target, source))
        self.database.write("DELETE FROM collections WHERE ns = ?", (source,))
        self._created.discard(source)
        self.database.write("DELETE FROM uuids WHERE ns = ?", (source,))
        self._uuids.pop(source, None)
        for cache in (self._indexes, self._views, self._unique, self._options):
            cache.pop(source, None)
            cache.pop(target, None)

    def drop_database(self, db: str) -> None:
        for ns in self.namespaces():
            if ns.split(".", 1)[0] == db:
                self.drop(ns)

    def clear(self) -> None:
        for table in ("docs", "collections", "uuids", "indexes", "views", "options", "images",
                      "sessions", "statements"):  # fmt: skip
            self.database.write(f"DELETE FROM {table}")
        self._created.clear()
        self._uuids.clear()
        self._options.clear()
        self._indexes.clear()
        self._views.clear()
        self._unique.clear()
        self._txns.clear()
        self._statements.clear()

    def apply(self, entry: dict[str, Any]) -> None:
        """Apply one oplog entry; applying it again changes nothing."""
        op = entry["op"]
        ns = entry["ns"]
        if op in ("i", "u", "d") and (ns not in self._created or ns not in self._uuids):
            self.create(ns, entry_uuid(entry))  # the UUID's decoding only when it is needed
        # Images are kept for entries of their own (a transaction's inner ones have no position).
        imaged = op in ("u", "d") and "ts" in entry and self._images_enabled(ns)
        before = self.get(ns, (entry["o2"] if op == "u" else entry["o"])["_id"]) if imaged else None
        after: dict[str, Any] | None = None
        if op == "u" and updatediff.is_diff(entry["o"]):
            current = before if imaged else self.get(ns, entry["o2"]["_id"])
            if current is not None:  # else deleted since: a later entry says so too
                after = updatediff.apply(current, entry["o"]["diff"])
                self.put(ns, after)
        elif op in ("i", "u"):
            after = entry["o"]
            self.put(ns, after)
        elif op == "d":
            self.remove(ns, entry["o"]["_id"])
        if imaged:
            self._keep_images(entry, before, after)
        elif op == "c":
            self._apply_command(ns.split(".", 1)[0], entry["o"], entry_uuid(entry))
        if "txnNumber" in entry:
            self.record_statement(
                entry["lsid"], int(entry["txnNumber"]), int(entry.get("stmtId", 0)), entry["res"]
            )

    def _images_enabled(self, ns: str) -> bool:
        setting = self.options(ns).get("changeStreamPreAndPostImages")
        return isinstance(setting, dict) and bool(setting.get("enabled"))

    def _keep_images(self, entry: dict[str, Any], pre: Any, post: Any) -> None:
        ts = entry["ts"]
        self.database.write(
            "INSERT OR REPLACE INTO images (t, secs, inc, pre, post) VALUES (?, ?, ?, ?, ?)",
            (int(entry["t"]), ts.time, ts.inc, None if pre is None else bson.encode(pre),
             None if post is None else bson.encode(post)),
        )  # fmt: skip

    def _apply_command(self, db: str, o: dict[str, Any], ui: uuid.UUID | None) -> None:
        if "create" in o and "viewOn" in o:
            definition = {"viewOn": o["viewOn"], "pipeline": o.get("pipeline", [])}
            self.create_view(f"{db}.{o['create']}", definition)
        elif "create" in o:
            self.create(f"{db}.{o['create']}", ui)
            if options := _option_fields(o):
                self.set_options(f"{db}.{o['create']}", options)
        elif "renameCollection" in o:
            self.rename(o["renameCollection"], o["to"], drop_target=bool(o.get("dropTarget")))
        elif "collMod" in o:
            ns = f"{db}.{o['collMod']}"
            self.set_options(ns, self.options(ns) | _option_fields(o))
        elif "drop" in o:
            self.drop(f"{db}.{o['drop']}")
        elif "dropDatabase" in o:
            self.drop_database(db)
        elif "applyOps" in o and not o.get("prepare"):  # a committed transaction, at once
            for inner in o["applyOps"]:
                self.apply(inner)
        elif "createIndexes" in o:
            spec = {key: value for key, value in o.items() if key != "createIndexes"}
            self.create(f"{db}.{o['createIndexes']}", ui)
            self.add_index(f"{db}.{o['createIndexes']}", spec)
        elif "dropIndexes" in o:
            self.drop_index(f"{db}.{o['dropIndexes']}", o["index"])

    # -- sessions --------------------------------------------------------------------------

    def txn_number(self, lsid: dict[str, Any]) -> int | None:
        """The newest transaction number this member has seen for a session."""
        return self._txn_number(session_key(lsid))

    def _txn_number(self, key: bytes) -> int | None:
        if key not in self._txns:
            row = self.database.execute("SELECT txn FROM sessions WHERE lsid = ?", (key,))
            found = row.fetchone()
            self._txns[key] = None if found is None else int(found[0])
        return self._txns[key]

    def statement_result(
        self, lsid: dict[str, Any], txn_number: int, stmt_id: int
    ) -> dict[str, Any] | None:
        """The recorded result of a statement already executed in that transaction."""
        if self.txn_number(lsid) != txn_number:
            return None
        row = self.database.execute(
            "SELECT result FROM statements WHERE lsid = ? AND stmt = ?",
            (session_key(lsid), stmt_id),
        ).fetchone()
        return None if row is None else bson.decode(row[0])

    def record_statement(
        self, lsid: dict[str, Any], txn_number: int, stmt_id: int, result: dict[str, Any]
    ) -> None:
        key = session_key(lsid)
        current = self._txn_number(key)
        if current is not None and current > txn_number:
            return
        recorded = self._statements.get(key)
        if current != txn_number:
            self._txns[key] = txn_number
            # A newer transaction number retires every statement of the older one (one that
            # this statement's row replaces needs no delete).
            if recorded != {stmt_id}:
                self.database.write("DELETE FROM statements WHERE lsid = ?", (key,))
            recorded = self._statements[key] = set()
            self.database.write(
                "INSERT INTO sessions (lsid, txn) VALUES (?, ?) "
                "ON CONFLICT (lsid) DO UPDATE SET txn = excluded.txn",
                (key, txn_number),
            )
        if recorded is not None:
            recorded.add(stmt_id)
        self.database.write(
            "INSERT OR REPLACE INTO statements (lsid, stmt, result) VALUES (?, ?, ?)",
            (key, stmt_id, bson.encode(result)),
        )
