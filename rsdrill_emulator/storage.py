"""A member's data directory: one SQLite database holding its documents, its oplog, its
retryable-write records and its replication metadata (term, vote, sync state).

Like a real storage engine, a restart only opens the files: the time to come back on a kept
volume does not grow with the data, while an initial sync copies every byte. Changes are made
inside one open transaction that is committed (and fsynced) by group commit every commit
interval, or at once for `j: true`; a SIGKILL loses what was not yet committed, as MongoDB's
journal would, and never leaves documents, oplog and metadata out of step with each other.

The member's working set in memory is SQLite's page cache (as WiredTiger's cache is mongod's):
pages read or written recently, least recently used evicted first, bounded by `cache_bytes`.
It starts empty with the process, and a secondary fills it only with what applying the oplog
touches, so a member restarted, or one that served no reads, is cold: each read that misses is
a read() of the data file (or of the write-ahead log), which on faultfs counts against an IOPS
cap (its compiled layer keeps no kernel page cache).

A commit is two steps, as mongod's journal write and its flush: SQLite writes the transaction
to its write-ahead log (under the connection's lock, which every read also takes), then the log
is fsynced through a descriptor of our own, without that lock, so reads and new writes go on
while the disk syncs; the commit is durable (and `j: true` answered) once the fsync returns.

Storage errors (EIO, ENOSPC from the disk, e.g. through faultfs) split as in mongod: a failed
read fails the operation that needed it (`StorageReadError`), while a failed write or commit
(fsync) is fatal: the data on disk can no longer be trusted, so `on_fatal` ends the process.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import bson

from rsdrill.sandbox.config import DATA_FILE

PAGE_BYTES = 16384
DEFAULT_CACHE_BYTES = 64 * 1024 * 1024
"""The page cache when the set's config names no size (`cache_mb`)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value BLOB) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS collections (ns TEXT PRIMARY KEY) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS uuids (ns TEXT PRIMARY KEY, uuid BLOB NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS docs (ns TEXT NOT NULL, k BLOB NOT NULL, doc BLOB NOT NULL);
CREATE UNIQUE INDEX IF NOT EXISTS docs_by_id ON docs (ns, k);
CREATE TABLE IF NOT EXISTS oplog (
    t INTEGER NOT NULL, secs INTEGER NOT NULL, inc INTEGER NOT NULL, entry BLOB NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS oplog_by_optime ON oplog (t, secs, inc);
CREATE TABLE IF NOT EXISTS indexes (
    ns TEXT NOT NULL, name TEXT NOT NULL, spec BLOB NOT NULL, PRIMARY KEY (ns, name)
);
CREATE TABLE IF NOT EXISTS views (ns TEXT PRIMARY KEY, definition BLOB NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS options (ns TEXT PRIMARY KEY, doc BLOB NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS images (
    t INTEGER NOT NULL, secs INTEGER NOT NULL, inc INTEGER NOT NULL, pre BLOB, post BLOB,
    PRIMARY KEY (t, secs, inc)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS sessions (lsid BLOB PRIMARY KEY, txn INTEGER) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS statements (
    lsid BLOB NOT NULL, stmt INTEGER NOT NULL, result BLOB NOT NULL, PRIMARY KEY (lsid, stmt)
) WITHOUT ROWID;
"""


_SET_META = "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)"


class StorageReadError(Exception):
    """Reading the data files failed; the operation fails, the member lives on."""


class Database:
    """The member's SQLite file, always inside an open transaction between commits."""

    def __init__(self, dbpath: Path, *, cache_bytes: int | None = None) -> None:
        self.dbpath = dbpath
        self.cache_bytes = cache_bytes or DEFAULT_CACHE_BYTES
        self.path = dbpath / DATA_FILE
        self.conn: sqlite3.Connection | None = None
        self._wal: int | None = None  # our descriptor of the write-ahead log, for its fsync
        self.dirty = False
        # Called on the event loop's thread by the first write after a commit.
        self.on_dirty: Callable[[], None] | None = None
        # Held across COMMIT + BEGIN, which may run on a worker thread (so that a slow disk
        # stalls only writers, as in mongod, not heartbeats): no write may land in between.
        self._txn = threading.Lock()
        # Called with a description when a write or commit fails; must not return.
        self.on_fatal: Callable[[str], NoReturn] | None = None
        # Run in the transaction just before each COMMIT, the lock held (write with `db`):
        # figures kept in memory reach the disk once a commit, with the rows they describe.
        self.before_commit: list[Callable[[], None]] = []

    def _fatal(self, what: str, exc: sqlite3.Error | OSError) -> NoReturn:
        if self.on_fatal is not None:
            self.on_fatal(f"{what}: {exc}")
        raise exc

    def exists(self) -> bool:
        """True when the directory holds a member's data (not an empty, new volume)."""
        if not self.path.exists():
            return False
        probe = sqlite3.connect(self.path)
        try:
            row = probe.execute("SELECT value FROM meta WHERE key = 'initialized'").fetchone()
        except sqlite3.DatabaseError:
            return False
        finally:
            probe.close()
        return row is not None

    def open(self) -> None:
        self.dbpath.mkdir(parents=True, exist_ok=True)
        self.conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        # Large pages: documents and oplog entries are kilobytes, written in bursts.
        self.conn.execute(f"PRAGMA page_size={PAGE_BYTES}")
        # A negative size is in KiB (a positive one would count pages).
        self.conn.execute(f"PRAGMA cache_size=-{max(self.cache_bytes // 1024, 1)}")
        self.conn.execute("PRAGMA journal_mode=WAL")
        # NORMAL: COMMIT writes the log without syncing it (SQLite still syncs around each
        # checkpoint); `commit` fsyncs it after, outside the lock reads take.
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self.conn.executescript(_SCHEMA)
        self.conn.execute("BEGIN")

    @property
    def db(self) -> sqlite3.Connection:
        if self.conn is None:
            raise RuntimeError("the database is not open")
        return self.conn

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> sqlite3.Cursor:
        try:
            return self.db.execute(sql, params)
        except sqlite3.OperationalError as exc:
            raise StorageReadError(f"reading {self.path.name}: {exc}") from exc

    def write(self, sql: str, params: tuple[Any, ...] = ()) -> sqlite3.Cursor:
        with self._txn:
            self._mark_dirty()
            try:
                return self.db.execute(sql, params)
            except sqlite3.OperationalError as exc:
                self._fatal(f"writing {self.path.name}", exc)

    def write_many(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        with self._txn:
            self._mark_dirty()
            try:
                self.db.executemany(sql, rows)
            except sqlite3.OperationalError as exc:
                self._fatal(f"writing {self.path.name}", exc)

    def _mark_dirty(self) -> None:
        if not self.dirty:
            self.dirty = True
            if self.on_dirty is not None:
                self.on_dirty()

    def commit(self, written: Callable[[], object] | None = None) -> None:
        """Make everything so far durable (fsynced), then open the next transaction.

        Safe to call from a worker thread while the event loop goes on reading. `written` is
        called once the transaction is in the log and the lock is free, before the fsync:
        from then on reads and writes need not wait for this commit."""
        with self._txn:
            if not self.dirty:
                return
            try:
                for hook in self.before_commit:
                    hook()
                self.db.execute("COMMIT")
                self.db.execute("BEGIN")
            except sqlite3.OperationalError as exc:
                self._fatal(f"journal commit (write) of {self.path.name}", exc)
            self.dirty = False
        if written is not None:
            written()
        try:
            if self._wal is None:
                self._wal = os.open(f"{self.path}-wal", os.O_RDONLY | os.O_CLOEXEC)
            # The inode's pages, whoever wrote them: SQLite's writes of this transaction too.
            os.fdatasync(self._wal)
        except OSError as exc:
            # Worded as SQLite words a failed sync, whichever of the two met it.
            self._fatal(f"journal commit (fsync) of {self.path.name}: disk I/O error", exc)

    def close(self) -> None:
        if self._wal is not None:
            os.close(self._wal)
            self._wal = None
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    # -- metadata --------------------------------------------------------------------------

    def get_meta(self, key: str) -> Any:
        row = self.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else bson.decode(row[0])["v"]

    def set_meta(self, key: str, value: Any) -> None:
        self.write(_SET_META, (key, bson.encode({"v": value})))

    def set_meta_before_commit(self, key: str, value: Any) -> None:
        """`set_meta` from a `before_commit` hook (which runs with the lock held)."""
        self.db.execute(_SET_META, (key, bson.encode({"v": value})))

    def size_bytes(self) -> int:
        """Bytes the database files take on disk."""
        return sum(p.stat().st_size for p in self.dbpath.glob(f"{DATA_FILE}*"))
