"""The oplog: optimes, entries, and a size-capped, ordered log of them.

An optime orders by term first, then timestamp, as MongoDB's OpTime does; an entry's `o` holds the
whole document after the change, so applying an entry twice gives the same result (idempotence is
what lets initial sync and rollback re-apply ranges safely).
"""

from __future__ import annotations

import bisect
import datetime as dt
import time
from dataclasses import dataclass
from typing import Any

import bson
from bson.int64 import Int64
from bson.timestamp import Timestamp


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
        now = int(time.time())
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
    entry["wall"] = dt.datetime.now(dt.UTC)
    if session:
        entry.update(session)
    return entry


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


class Oplog:
    """Entries in optime order, trimmed from the oldest end to stay under a byte capacity."""

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity_bytes = capacity_bytes
        self._keys: list[OpTime] = []
        self._entries: list[dict[str, Any]] = []
        self._sizes: list[int] = []
        self._start = 0
        self.size_bytes = 0

    def __len__(self) -> int:
        return len(self._keys) - self._start

    @property
    def newest(self) -> OpTime:
        return self._keys[-1] if len(self) else NULL_OPTIME

    @property
    def oldest(self) -> OpTime:
        return self._keys[self._start] if len(self) else NULL_OPTIME

    def newest_entry(self) -> dict[str, Any] | None:
        return self._entries[-1] if len(self) else None

    def append(self, entry: dict[str, Any], size: int | None = None) -> None:
        key = OpTime.of(entry)
        if len(self) and key <= self._keys[-1]:
            raise ValueError(f"oplog entry {key} is not newer than {self._keys[-1]}")
        size = size if size is not None else len(bson.encode(entry))
        self._keys.append(key)
        self._entries.append(entry)
        self._sizes.append(size)
        self.size_bytes += size
        self._trim()

    def _trim(self) -> None:
        # Always keep the newest entry: it is the member's position.
        while self.size_bytes > self.capacity_bytes and len(self) > 1:
            self.size_bytes -= self._sizes[self._start]
            self._start += 1
        if self._start > 1024 and self._start * 2 > len(self._keys):
            del self._keys[: self._start], self._entries[: self._start], self._sizes[: self._start]
            self._start = 0

    def _index(self, key: OpTime) -> int | None:
        i = bisect.bisect_left(self._keys, key, lo=self._start)
        if i < len(self._keys) and self._keys[i] == key:
            return i
        return None

    def contains(self, key: OpTime) -> bool:
        return self._index(key) is not None

    def entries_after(self, key: OpTime, max_bytes: int) -> list[dict[str, Any]]:
        """Entries newer than `key`, at least one if there is one, up to about max_bytes."""
        i = bisect.bisect_right(self._keys, key, lo=self._start)
        out: list[dict[str, Any]] = []
        total = 0
        while i < len(self._keys) and (not out or total + self._sizes[i] <= max_bytes):
            out.append(self._entries[i])
            total += self._sizes[i]
            i += 1
        return out

    def entry_at(self, key: OpTime) -> dict[str, Any] | None:
        i = self._index(key)
        return None if i is None else self._entries[i]

    def keys_newest_first(self) -> list[OpTime]:
        return self._keys[self._start :][::-1]

    def truncate_after(self, key: OpTime) -> list[dict[str, Any]]:
        """Remove and return (oldest first) every entry newer than `key`."""
        i = bisect.bisect_right(self._keys, key, lo=self._start)
        removed = self._entries[i:]
        self.size_bytes -= sum(self._sizes[i:])
        del self._keys[i:], self._entries[i:], self._sizes[i:]
        return removed

    def clear(self) -> None:
        self._keys, self._entries, self._sizes = [], [], []
        self._start = 0
        self.size_bytes = 0
