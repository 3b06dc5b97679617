"""Power loss: undo records of what was written since each file's last fsync.

Before a write, truncate or create reaches the backing file, the bytes it is about to change
are saved (once per byte between two fsyncs, so the record never outgrows the file). An fsync
makes the file's changes durable and drops its record. `power_loss()` puts every file back as
it was at its last fsync: what a power cut does to a page cache, and a SIGKILL does not.

Covered: data written with write(), size changes (truncate, extension by writes), files created
since their last fsync (removed). Not covered: renames, unlinks, directory creation and
removal, which stay done (a journaling filesystem usually commits them within seconds anyway);
shared-memory mappings of files are written back through write() and so are covered. A change
and its undo record are made under one lock that a power loss holds while it restores, so a
write the daemon was carrying out for the killed process is undone whole. (One it had read from
the kernel but not yet begun when the restore ran would land after it: a window of
microseconds, as the kernel drops a dead process's requests not yet handed over.)
"""

from __future__ import annotations

import bisect
import os
import threading
from dataclasses import dataclass, field


@dataclass
class _FileUndo:
    """One file's state at its last fsync, saved piecewise as it gets overwritten."""

    created: bool  # did not exist at the last sync point: power loss removes it
    size: int  # its size at the last sync point
    # Saved byte ranges of the synced content: sorted, disjoint (start, bytes).
    starts: list[int] = field(default_factory=list)
    chunks: list[bytes] = field(default_factory=list)

    def gaps(self, start: int, end: int) -> list[tuple[int, int]]:
        """Parts of [start, end) within the synced size that are not saved yet."""
        end = min(end, self.size)
        out = []
        position = start
        i = max(bisect.bisect_right(self.starts, start) - 1, 0)
        while position < end and i < len(self.starts):
            s, e = self.starts[i], self.starts[i] + len(self.chunks[i])
            if e <= position:
                i += 1
                continue
            if s >= end:
                break
            if s > position:
                out.append((position, s))
            position = max(position, e)
            i += 1
        if position < end:
            out.append((position, end))
        return out

    def save(self, start: int, data: bytes) -> None:
        i = bisect.bisect_left(self.starts, start)
        self.starts.insert(i, start)
        self.chunks.insert(i, data)

    @property
    def saved_bytes(self) -> int:
        return sum(len(c) for c in self.chunks)


class UndoLog:
    """Undo records of every file of one backing directory, keyed by relative path."""

    def __init__(self, root_fd: int) -> None:
        self.root_fd = root_fd
        # Held by the filesystem around each change (record, then write) and by a power loss
        # for the whole restore: a write still in flight lands before the restore, or after
        # its record is gone, never in between.
        self.lock = threading.RLock()
        self._files: dict[str, _FileUndo] = {}

    def _record(self, path: str) -> _FileUndo:
        record = self._files.get(path)
        if record is None:
            try:
                size = os.stat(path, dir_fd=self.root_fd, follow_symlinks=False).st_size
                record = _FileUndo(created=False, size=size)
            except FileNotFoundError:
                record = _FileUndo(created=True, size=0)
            self._files[path] = record
        return record

    def before_create(self, path: str) -> None:
        with self.lock:
            self._record(path)

    def before_change(self, path: str, fd: int, start: int, end: int) -> None:
        """Save the synced bytes in [start, end) of the file open as `fd` before they change."""
        with self.lock:
            record = self._record(path)
            for gap_start, gap_end in record.gaps(start, end):
                record.save(gap_start, self._read(path, fd, gap_start, gap_end - gap_start))

    def _read(self, path: str, fd: int, start: int, length: int) -> bytes:
        try:
            return os.pread(fd, length, start)
        except OSError:
            # Opened write-only: read through a descriptor of our own.
            own = os.open(path, os.O_RDONLY, dir_fd=self.root_fd)
            try:
                return os.pread(own, length, start)
            finally:
                os.close(own)

    def before_truncate(self, path: str, fd: int, length: int) -> None:
        self.before_change(path, fd, length, 1 << 62)

    def synced(self, path: str) -> None:
        """The file's content is durable now."""
        with self.lock:
            self._files.pop(path, None)

    def renamed(self, old: str, new: str) -> None:
        with self.lock:
            record = self._files.pop(old, None)
            self._files.pop(new, None)
            if record is not None:
                self._files[new] = record

    def removed(self, path: str) -> None:
        with self.lock:
            self._files.pop(path, None)

    def pending(self) -> dict[str, int]:
        """Bytes saved per file not yet fsynced (-1: a file created since its last fsync)."""
        with self.lock:
            return {p: -1 if r.created else r.saved_bytes for p, r in self._files.items()}

    def power_loss(self) -> dict[str, int]:
        """Put every file back as it was at its last fsync; per file, the bytes dropped
        (overwritten ones restored plus those appended), -1 for a file removed."""
        with self.lock:
            files, self._files = self._files, {}
            return {path: n for path, record in files.items()
                    if (n := self._restore(path, record)) is not None}  # fmt: skip

    def _restore(self, path: str, record: _FileUndo) -> int | None:
        """Put one file back; the bytes dropped, -1 if removed, None if it is gone already."""
        if record.created:
            try:
                os.unlink(path, dir_fd=self.root_fd)
            except FileNotFoundError:
                return None
            return -1
        try:
            fd = os.open(path, os.O_WRONLY, dir_fd=self.root_fd)
        except FileNotFoundError:
            return None  # removed since: unlinks are not undone
        try:
            grown = max(0, os.fstat(fd).st_size - record.size)
            os.ftruncate(fd, record.size)
            for start, chunk in zip(record.starts, record.chunks, strict=True):
                os.pwrite(fd, chunk, start)
            os.fsync(fd)
        finally:
            os.close(fd)
        return record.saved_bytes + grown
