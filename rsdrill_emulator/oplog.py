"""The oplog: optimes, entries, and a size-capped, ordered log of them.

An optime orders by term first, then timestamp, as MongoDB's OpTime does; an entry's `o` holds the
whole document after the change, so applying an entry twice gives the same result (idempotence is
what lets initial sync and rollback re-apply ranges safely).
"""

from __future__ import annotations

import datetime as dt
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from typing import Any

import bson
from bson.int64 import Int64
from bson.timestamp import Timestamp

from rsdrill_emulator import wallclock
from rsdrill_emulator.storage import Database


@dataclass(frozen=True, order=True)
class OpTime:
    """A position in the oplog: (term, seconds, increment)."""

    term: int
    secs: int
    inc: int

    @classmethod
    def of(cls, entry: dict[str, Any]) -> OpTime:
        ts: Timestamp = entry["ts"]
        return cls(int(entry["t"]), ts.time, ts.inc)

    @classmethod
    def from_doc(cls, doc: dict[str, Any] | None) -> OpTime:
        if not doc:
            return NULL_OPTIME
        ts: Timestamp = doc["ts"]
        return cls(int(doc["t"]), ts.time, ts.inc)

    @property
    def timestamp(self) -> Timestamp:
        return Timestamp(self.secs, self.inc)

    def document(self) -> dict[str, Any]:
        """MongoDB's `{ts, t}` shape."""
        return {"ts": self.timestamp, "t": Int64(self.term)}

    def date(self) -> dt.datetime:
        return dt.datetime.fromtimestamp(self.secs, dt.UTC)


NULL_OPTIME = OpTime(-1, 0, 0)
# Every member initiated by the sandbox starts with this same entry, so they share a common point.
INITIATE_OPTIME = OpTime(-1, 1, 1)


class TimestampClock:
    """Hands out strictly increasing oplog timestamps: wall seconds plus an increment."""

    def __init__(self) -> None:
        self._secs = 0
        self._inc = 0

    def observe(self, ts: Timestamp) -> None:
        if (ts.time, ts.inc) > (self._secs, self._inc):
            self._secs, self._inc = ts.time, ts.inc

    def next(self) -> Timestamp:
        now = int(wallclock.time_s())
        if now > self._secs:
            self._secs, self._inc = now, 1
        else:
            self._inc += 1
        return Timestamp(self._secs, self._inc)


def make_entry(
    op: str,
    ns: str,
    o: dict[str, Any],
    *,
    ts: Timestamp,
    term: int,
    o2: dict[str, Any] | None = None,
    session: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """An oplog entry. `session` carries lsid/txnNumber/stmtId/result for retryable writes."""
    entry: dict[str, Any] = {"ts": ts, "t": Int64(term), "v": 2, "op": op, "ns": ns}
    if o2 is not None:
        entry["o2"] = o2
    entry["o"] = o
    entry["wall"] = wallclock.now()
    if session:
        entry.update(session)
    return entry


def operations(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """The operations an entry applies: itself, or each of a committed transaction's (one
    `applyOps` entry carries a whole transaction, so it replicates and rolls back as a unit);
    none for a prepared transaction's (its commit entry applies them)."""
    if is_prepare(entry):
        return []
    if entry["op"] == "c" and "applyOps" in entry["o"]:
        return list(entry["o"]["applyOps"])
    return [entry]


def is_prepare(entry: dict[str, Any]) -> bool:
    """A transaction prepared for a two-phase commit (rsdrill_emulator/prepared.py)."""
    o = entry.get("o") or {}
    return entry.get("op") == "c" and "applyOps" in o and bool(o.get("prepare"))


def visible_at(entry: dict[str, Any]) -> Timestamp:
    """When an entry's changes become visible to a read at a timestamp: a prepared
    transaction's at its commit timestamp, anything else at its own."""
    found = (entry.get("o") or {}).get("commitTimestamp") if entry.get("op") == "c" else None
    return found if isinstance(found, Timestamp) else entry["ts"]


def changed_ids(entry: dict[str, Any]) -> list[tuple[str, Any]]:
    """(namespace, _id) of every document an oplog entry changes (a transaction's, each)."""
    out = []
    for op in operations(entry):
        if op["op"] in ("i", "u", "d"):
            out.append((op["ns"], op["o2"]["_id"] if op["op"] == "u" else op["o"]["_id"]))
    return out


def initiate_entry() -> dict[str, Any]:
    """The first entry of a freshly initiated set (identical on every member)."""
    return {
        "ts": INITIATE_OPTIME.timestamp,
        "t": Int64(INITIATE_OPTIME.term),
        "v": 2,
        "op": "n",
        "ns": "",
        "o": {"msg": "initiating set"},
        "wall": dt.datetime.fromtimestamp(0, dt.UTC),
    }


# The newest entries are kept in memory too, as a storage engine's cache keeps the hot end of
# the oplog: fetches from sync sources are then answered without waiting for the disk.
TAIL_BYTES = 4 * 1024 * 1024
# The meta key of the oplog's [entry count, bytes], as of the last commit.
_SIZE_KEY = "oplog_size"


class Oplog:
    """Entries in optime order in the member's database, trimmed from the oldest end to stay
    under a byte capacity. The newest ones, appended since the member started, are also kept in
    memory (the tail: a contiguous run ending at the newest entry, at most TAIL_BYTES)."""

    def __init__(self, capacity_bytes: int, database: Database) -> None:
        self.capacity_bytes = capacity_bytes
        self.database = database
        # Its entry count and bytes are kept beside it, as mongod's size storer keeps them: a
        # restart on a kept volume reads two numbers instead of scanning the whole oplog
        # (seconds for a large one on a busy disk, where mongod's restart costs nothing).
        stored = database.get_meta(_SIZE_KEY)
        if stored is None:  # a data directory from before the figures were kept
            row = database.execute("SELECT COUNT(*), COALESCE(SUM(LENGTH(entry)), 0) FROM oplog")
            stored = row.fetchone()
        self._count, self.size_bytes = stored
        self._stored_size: tuple[int, int] | None = None
        database.before_commit.append(self._store_size)
        self._set_newest(self._edge("DESC"))
        self._oldest_key = OpTime.of(e) if (e := self._edge("ASC")) else NULL_OPTIME
        self._tail_keys: list[OpTime] = []
        self._tail: list[dict[str, Any]] = []
        self._tail_sizes: list[int] = []
        self._tail_bytes = 0

    def _store_size(self) -> None:
        size = (self._count, self.size_bytes)
        if size != self._stored_size:
            self.database.set_meta_before_commit(_SIZE_KEY, list(size))
            self._stored_size = size

    def _edge(self, order: str) -> dict[str, Any] | None:
        row = self.database.execute(
            f"SELECT entry FROM oplog ORDER BY t {order}, secs {order}, inc {order} LIMIT 1"
        ).fetchone()
        return None if row is None else bson.decode(row[0])

    def __len__(self) -> int:
        return self._count

    @property
    def newest(self) -> OpTime:
        return self._newest_key

    @property
    def oldest(self) -> OpTime:
        return self._oldest_key if self._count else NULL_OPTIME

    def _set_newest(self, entry: dict[str, Any] | None) -> None:
        # Its key kept beside it: the member's position is asked several times per write.
        self._newest = entry
        self._newest_key = OpTime.of(entry) if entry else NULL_OPTIME

    def newest_entry(self) -> dict[str, Any] | None:
        return self._newest

    def cached(self, key: OpTime) -> bool:
        """Whether `key` is in the tail: then it and every entry after it are read from memory."""
        return self._tail_index(key) is not None

    def _tail_index(self, key: OpTime) -> int | None:
        i = bisect_left(self._tail_keys, key)
        return i if i < len(self._tail_keys) and self._tail_keys[i] == key else None

    def _remember(self, key: OpTime, entry: dict[str, Any], size: int) -> None:
        self._tail_keys.append(key)
        self._tail.append(entry)
        self._tail_sizes.append(size)
        self._tail_bytes += size
        # Never more than the capacity: what the tail holds is then still in the database.
        limit = min(TAIL_BYTES, self.capacity_bytes)
        if self._tail_bytes <= limit:
            return
        # Down to three quarters at once: the lists' fronts go in batches, not entry by entry.
        drop, left = 0, self._tail_bytes
        while left > limit * 3 // 4 and drop < len(self._tail_keys) - 1:
            left -= self._tail_sizes[drop]
            drop += 1
        self._forget(slice(0, drop))

    def _forget(self, part: slice) -> None:
        self._tail_bytes -= sum(self._tail_sizes[part])
        del self._tail_keys[part], self._tail[part], self._tail_sizes[part]

    def append(self, entry: dict[str, Any], data: bytes | None = None) -> None:
        key = OpTime.of(entry)
        if self._count and key <= self.newest:
            raise ValueError(f"oplog entry {key} is not newer than {self.newest}")
        data = data if data is not None else bson.encode(entry)
        self.database.write(
            "INSERT INTO oplog (t, secs, inc, entry) VALUES (?, ?, ?, ?)",
            (key.term, key.secs, key.inc, data),
        )
        if not self._count:
            self._oldest_key = key
        self._count += 1
        self.size_bytes += len(data)
        self._newest, self._newest_key = entry, key
        self._remember(key, entry, len(data))
        self._trim()

    def _trim(self) -> None:
        # Always keep the newest entry: it is the member's position.
        while self.size_bytes > self.capacity_bytes and self._count > 1:
            rows = self.database.execute(
                "SELECT t, secs, inc, LENGTH(entry) FROM oplog ORDER BY t, secs, inc LIMIT 64"
            ).fetchall()
            for t, secs, inc, size in rows[: self._count - 1]:
                if self.size_bytes <= self.capacity_bytes:
                    break
                self.database.write(
                    "DELETE FROM oplog WHERE t = ? AND secs = ? AND inc = ?", (t, secs, inc)
                )
                self._count -= 1
                self.size_bytes -= size
            first = self._edge("ASC")
            self._oldest_key = OpTime.of(first) if first else NULL_OPTIME

    def contains(self, key: OpTime) -> bool:
        return self.entry_at(key) is not None

    def entry_at(self, key: OpTime) -> dict[str, Any] | None:
        if (i := self._tail_index(key)) is not None:
            return self._tail[i]
        row = self.database.execute(
            "SELECT entry FROM oplog WHERE t = ? AND secs = ? AND inc = ?",
            (key.term, key.secs, key.inc),
        ).fetchone()
        return None if row is None else bson.decode(row[0])

    def entries_after(self, key: OpTime, max_bytes: int) -> list[dict[str, Any]]:
        """Entries newer than `key`, at least one if there is one, up to about max_bytes."""
        if (start := self._tail_index(key)) is not None:
            entries: list[dict[str, Any]] = []
            total = 0
            for i in range(start + 1, len(self._tail_keys)):
                if entries and total + self._tail_sizes[i] > max_bytes:
                    break
                entries.append(self._tail[i])
                total += self._tail_sizes[i]
            return entries
        rows = self.database.execute(
            "SELECT entry FROM oplog WHERE (t, secs, inc) > (?, ?, ?) ORDER BY t, secs, inc",
            (key.term, key.secs, key.inc),
        )
        encoded: list[bytes] = []
        total = 0
        for (data,) in rows:
            if encoded and total + len(data) > max_bytes:
                break
            encoded.append(data)
            total += len(data)
        return bson.decode_all(b"".join(encoded))

    def entries_from_ts(self, ts: Timestamp, inclusive: bool) -> list[dict[str, Any]]:
        """Every entry whose `ts` is after `ts` (or at it, `inclusive`), oldest first: a scan
        that starts where the bound is, as mongod's oplog scans start at a `ts` lower bound.
        Within one oplog a later term never has an earlier timestamp, so `ts` orders it too."""
        bound = (ts.time, ts.inc)
        if self._tail_keys and (self._tail_keys[0].secs, self._tail_keys[0].inc) <= bound:
            find = bisect_left if inclusive else bisect_right
            start = find(self._tail_keys, bound, key=lambda k: (k.secs, k.inc))
            return self._tail[start:]
        rows = self.database.execute(
            f"SELECT entry FROM oplog WHERE (secs, inc) {'>=' if inclusive else '>'} (?, ?) "
            "ORDER BY t, secs, inc",
            bound,
        )
        return bson.decode_all(b"".join(data for (data,) in rows))

    def newest_entries(self, count: int) -> list[dict[str, Any]]:
        """The newest `count` entries, newest first (an index range: however long the oplog)."""
        rows = self.database.execute(
            "SELECT entry FROM oplog ORDER BY t DESC, secs DESC, inc DESC LIMIT ?", (count,)
        ).fetchall()
        return [bson.decode(row[0]) for row in rows]

    def keys_newest_first(self) -> list[OpTime]:
        rows = self.database.execute(
            "SELECT t, secs, inc FROM oplog ORDER BY t DESC, secs DESC, inc DESC"
        ).fetchall()
        return [OpTime(t, secs, inc) for t, secs, inc in rows]

    def truncate_after(self, key: OpTime) -> list[dict[str, Any]]:
        """Remove and return (oldest first) every entry newer than `key`."""
        removed = self.entries_after(key, max_bytes=1 << 62)
        self.database.write(
            "DELETE FROM oplog WHERE (t, secs, inc) > (?, ?, ?)", (key.term, key.secs, key.inc)
        )
        self._count -= len(removed)
        self.size_bytes -= sum(len(bson.encode(e)) for e in removed)
        self._set_newest(self._edge("DESC"))
        self._forget(slice(bisect_right(self._tail_keys, key), None))
        return removed

    def clear(self) -> None:
        self.database.write("DELETE FROM oplog")
        self._count = 0
        self.size_bytes = 0
        self._set_newest(None)
        self._oldest_key = NULL_OPTIME
        self._forget(slice(None))
