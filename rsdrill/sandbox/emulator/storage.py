"""A member's data directory: an append-only journal of BSON records, fsynced by group commit.

Everything a member must find again after a restart goes through the journal: oplog entries
(which carry the documents), term and vote, rollback fix-ups, initial-sync clones. Records are
buffered in memory and written with one fsync every commit interval, or at once when a write asks
for j:true, so a SIGKILL loses what was not yet committed, as with MongoDB's journal.
"""

from __future__ import annotations

import asyncio
import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bson

JOURNAL = "journal.bson"
_INT32 = struct.Struct("<i")


class Storage:
    """The journal file of one data directory."""

    def __init__(self, dbpath: Path) -> None:
        self.dbpath = dbpath
        self.path = dbpath / JOURNAL
        self._buffer: list[bytes] = []
        self._fd: int | None = None
        self._lock = asyncio.Lock()
        self.bytes_written = 0

    def exists(self) -> bool:
        """True when the directory holds a journal with at least one record."""
        return self.path.exists() and self.path.stat().st_size > 0

    def load(self) -> Iterator[dict[str, Any]]:
        """Every record in order; a torn record at the tail (a crash mid-write) is cut off."""
        if not self.path.exists():
            return iter(())
        data = self.path.read_bytes()
        try:
            records = bson.decode_all(data)
        except bson.errors.BSONError:
            end = _valid_prefix(data)
            with open(self.path, "r+b") as f:
                f.truncate(end)
            data = data[:end]
            records = bson.decode_all(data)
        self.bytes_written = len(data)
        return iter(records)

    def open(self) -> None:
        self.dbpath.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def append(self, record: dict[str, Any]) -> int:
        """Buffer a record for the next commit; returns its encoded size."""
        data = bson.encode(record)
        self._buffer.append(data)
        return len(data)

    def append_encoded(self, data: bytes) -> None:
        self._buffer.append(data)

    @property
    def pending(self) -> bool:
        return bool(self._buffer)

    async def commit(self) -> None:
        """Write and fsync everything buffered so far (one commit at a time)."""
        async with self._lock:
            if not self._buffer or self._fd is None:
                return
            data = b"".join(self._buffer)
            self._buffer = []
            fd = self._fd
            await asyncio.to_thread(_write_and_sync, fd, data)
            self.bytes_written += len(data)


def _valid_prefix(data: bytes) -> int:
    """Length of the leading run of whole BSON records."""
    end = 0
    while end + 4 <= len(data):
        (size,) = _INT32.unpack_from(data, end)
        if size < 5 or end + size > len(data) or data[end + size - 1] != 0:
            break
        try:
            bson.decode(data[end : end + size])
        except bson.errors.BSONError:
            break
        end += size
    return end


def _write_and_sync(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]
    os.fsync(fd)
