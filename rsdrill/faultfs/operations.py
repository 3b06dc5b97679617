"""The filesystem operations: a passthrough to a backing directory (or a mirror of two,
`mirror.py`), with faults applied.

Every path is resolved relative to a descriptor of the backing directory opened before the
mount, so the filesystem can be mounted over its own backing directory (a member's data
directory stays where its server expects it). File handles are the (first) backing file
descriptors. Data operations consult the fault state (`state.py`) first; metadata operations
only fail when the volume is detached. With an undo log (`undo.py`, one backing directory
only), changes not yet fsynced can be dropped.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable
from typing import Any

import mfusepy

from rsdrill.faultfs.mirror import Backing
from rsdrill.faultfs.state import FaultState
from rsdrill.faultfs.undo import UndoLog

_STAT_FIELDS = ("st_mode", "st_ino", "st_dev", "st_nlink", "st_uid", "st_gid", "st_size",
                "st_blocks", "st_blksize", "st_rdev")  # fmt: skip


def _rel(path: str | None) -> str:
    return "." if not path or path == "/" else path.lstrip("/")


def _stat_dict(st: os.stat_result) -> dict[str, Any]:
    out: dict[str, Any] = {name: getattr(st, name) for name in _STAT_FIELDS}
    out.update(st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns, st_ctime=st.st_ctime_ns)
    return out


class FaultOperations(mfusepy.Operations):
    """Passthrough operations over `backing`, faulted by `state`, undoable through `undo`
    (whose records read the files through the handles: one backing directory only)."""

    use_ns = True

    def __init__(self, backing: Backing, state: FaultState, undo: UndoLog | None) -> None:
        if undo is not None and backing.mirrored:
            raise ValueError("unsynced-write tracking needs a mount with one backing directory")
        self.backing = backing
        self.state = state
        self.undo = undo

    # -- fault checks ----------------------------------------------------------------------

    def _admit(self, operation: str, path: str | None, nbytes: int = 0) -> None:
        failure = self.state.admit(operation, _rel(path), nbytes)
        if failure is not None:
            raise mfusepy.FuseOSError(failure)

    def _metadata(self, path: str | None = None) -> None:
        if self.state.detached:
            raise mfusepy.FuseOSError(errno.EIO)

    # -- metadata ----------------------------------------------------------------------------

    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        # A detached volume answers nothing but its root's attributes, so that `stat` of the
        # mount point (and tools walking the mount table) never error out.
        if _rel(path) != ".":
            self._metadata(path)
        if fh is not None:
            return _stat_dict(os.fstat(fh))
        rel = _rel(path)
        return _stat_dict(
            self.backing.look(lambda root: os.stat(rel, dir_fd=root, follow_symlinks=False))
        )

    def readdir(self, path: str, fh: int) -> list[str]:
        self._metadata(path)
        rel = _rel(path)

        def listing(root: int) -> list[str]:
            fd = os.open(rel, os.O_RDONLY | os.O_DIRECTORY, dir_fd=root)
            try:
                return os.listdir(fd)
            finally:
                os.close(fd)

        return [".", "..", *self.backing.look(listing)]

    def readlink(self, path: str) -> str:
        self._metadata(path)
        rel = _rel(path)
        return self.backing.look(lambda root: os.readlink(rel, dir_fd=root))

    def _owner(self) -> tuple[int, int] | None:
        """Who a new file or directory goes to: the process that created it, as a plain
        filesystem would (the daemon runs as root; a mongod user must own its files after
        unmounting)."""
        uid, gid, _ = mfusepy.fuse_get_context()
        return (uid, gid) if os.geteuid() == 0 and (uid, gid) != (0, 0) else None

    def _made(self, rel: str, make: Callable[[int], None]) -> None:
        """A new entry made in each backing directory, given to its creator."""
        owner = self._owner()

        def made(root: int) -> None:
            make(root)
            if owner is not None:
                os.chown(rel, *owner, dir_fd=root, follow_symlinks=False)

        self.backing.change((rel,), made)

    def mkdir(self, path: str, mode: int) -> None:
        self._metadata(path)
        rel = _rel(path)
        self._made(rel, lambda root: os.mkdir(rel, mode, dir_fd=root))

    def rmdir(self, path: str) -> None:
        self._metadata(path)
        rel = _rel(path)
        self.backing.change((rel,), lambda root: os.rmdir(rel, dir_fd=root))

    def unlink(self, path: str) -> None:
        self._metadata(path)
        rel = _rel(path)
        self.backing.change((rel,), lambda root: os.unlink(rel, dir_fd=root))
        if self.undo is not None:
            self.undo.removed(rel)

    def rename(self, old: str, new: str) -> None:
        self._metadata(old)
        rels = (_rel(old), _rel(new))
        self.backing.change(rels, lambda root: os.rename(*rels, src_dir_fd=root,
                                                         dst_dir_fd=root))  # fmt: skip
        if self.undo is not None:
            self.undo.renamed(*rels)
        self.backing.renamed(*rels)

    def symlink(self, target: str, source: str) -> None:
        self._metadata(target)
        rel = _rel(target)
        self._made(rel, lambda root: os.symlink(source, rel, dir_fd=root))

    def link(self, target: str, source: str) -> None:
        self._metadata(target)
        rels = (_rel(target), _rel(source))
        self.backing.change(rels, lambda root: os.link(rels[1], rels[0], src_dir_fd=root,
                                                       dst_dir_fd=root))  # fmt: skip

    def chmod(self, path: str, mode: int) -> None:
        self._metadata(path)
        rel = _rel(path)
        self.backing.change((rel,), lambda root: os.chmod(rel, stat.S_IMODE(mode), dir_fd=root))

    def chown(self, path: str, uid: int, gid: int) -> None:
        self._metadata(path)
        rel = _rel(path)
        self.backing.change((rel,), lambda root: os.chown(rel, uid, gid, dir_fd=root,
                                                          follow_symlinks=False))  # fmt: skip

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> None:
        self._metadata(path)
        rel = _rel(path)
        # No times given: both become now, as utimensat(2) with NULL.
        ns = {} if times is None else {"ns": times}
        self.backing.change((rel,), lambda root: os.utime(rel, dir_fd=root,
                                                          follow_symlinks=False, **ns))  # fmt: skip

    def statfs(self, path: str) -> dict[str, int]:
        self._metadata(path)
        st = self.backing.look(os.fstatvfs)
        names = ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree",
                 "f_favail", "f_flag", "f_namemax")  # fmt: skip
        return {name: getattr(st, name) for name in names}

    def access(self, path: str, amode: int) -> None:
        self._metadata(path)
        rel = _rel(path)
        if not self.backing.look(lambda root: os.access(rel, amode, dir_fd=root)):
            raise mfusepy.FuseOSError(errno.EACCES)

    # -- files -------------------------------------------------------------------------------

    def open(self, path: str, flags: int) -> int:
        self._metadata(path)
        self._admit("open", path)
        rel = _rel(path)
        with self._changing():
            if self.undo is not None and flags & os.O_TRUNC:
                self.undo.before_create(rel)
                self._truncate_undo(rel, 0)
            # O_DIRECT already kept the kernel's cache out of it; the daemon's own buffers are
            # not aligned as the backing filesystem would demand.
            return self.backing.open(
                rel, flags, "open", lambda root: os.open(rel, flags & ~os.O_DIRECT, dir_fd=root)
            )

    def create(self, path: str, mode: int, fi: Any = None) -> int:
        self._metadata(path)
        self._admit("open", path)
        rel = _rel(path)
        if self.undo is not None:
            self.undo.before_create(rel)
        owner = self._owner()

        def created(root: int) -> int:
            fd = os.open(rel, os.O_CREAT | os.O_RDWR, mode, dir_fd=root)
            if owner is not None:
                os.chown(rel, *owner, dir_fd=root, follow_symlinks=False)
            return fd

        return self.backing.open(rel, os.O_RDWR | os.O_CREAT, "open", created)

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        self._admit("read", path, size)
        return self.backing.read(fh, _rel(path), size, lambda fd: os.pread(fd, size, offset))

    def _changing(self) -> contextlib.AbstractContextManager[object]:
        """Held around a change and its undo record (see `UndoLog.lock`)."""
        return self.undo.lock if self.undo is not None else contextlib.nullcontext()

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        self._admit("write", path, len(data))
        rel = self.backing.path(fh, _rel(path))
        with self._changing():
            if self.undo is not None:
                self.undo.before_change(rel, fh, offset, offset + len(data))
            return self.backing.write(
                fh,
                "write",
                rel,
                (offset, offset + len(data)),
                lambda fd: os.pwrite(fd, data, offset),
            )

    def truncate(self, path: str, length: int, fh: int | None = None) -> None:
        self._metadata(path)
        self._admit("write", path)
        rel = _rel(path)

        def truncated(root: int) -> None:
            fd = os.open(rel, os.O_WRONLY, dir_fd=root)
            try:
                os.ftruncate(fd, length)
            finally:
                os.close(fd)

        with self._changing():
            if self.undo is not None:
                self._truncate_undo(rel, length)
            self.backing.change((rel,), truncated)

    def _truncate_undo(self, rel: str, length: int) -> None:
        assert self.undo is not None
        undo = self.undo

        def record(root: int) -> None:
            try:
                fd = os.open(rel, os.O_RDONLY, dir_fd=root)
            except FileNotFoundError:
                return
            try:
                undo.before_truncate(rel, fd, length)
            finally:
                os.close(fd)

        self.backing.look(record)

    def fallocate(self, path: str, mode: int, offset: int, size: int, fh: int) -> None:
        self._admit("write", path)
        if mode:
            raise mfusepy.FuseOSError(errno.EOPNOTSUPP)
        rel = self.backing.path(fh, _rel(path))
        with self._changing():
            if self.undo is not None:
                self.undo.before_change(rel, fh, offset, offset + size)
            self.backing.write(
                fh, "write", rel, (offset, offset + size),
                lambda fd: os.posix_fallocate(fd, offset, size),
            )  # fmt: skip

    def fsync(self, path: str, datasync: int, fh: int) -> None:
        self._admit("fsync", path)
        rel = self.backing.path(fh, _rel(path))
        self.backing.write(fh, "fsync", rel, None, os.fdatasync if datasync else os.fsync)
        if self.undo is not None:
            self.undo.synced(rel)

    def flush(self, path: str, fh: int) -> None:
        # close() of a duplicate descriptor: nothing is buffered here, the backing fd stays.
        if self.state.detached:
            raise mfusepy.FuseOSError(errno.EIO)

    def release(self, path: str, fh: int) -> None:
        self.backing.release(fh)

    def fsyncdir(self, path: str, datasync: int, fh: int) -> None:
        self._admit("fsync", path)
