"""The filesystem operations: a passthrough to a backing directory, with faults applied.

Every path is resolved relative to a descriptor of the backing directory opened before the
mount, so the filesystem can be mounted over its own backing directory (a member's data
directory stays where its server expects it). File handles are the backing file descriptors.
Data operations consult the fault state (`state.py`) first; metadata operations only fail when
the volume is detached. With an undo log (`undo.py`), changes not yet fsynced can be dropped.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from typing import Any

import mfusepy

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
    """Passthrough operations over `root_fd`, faulted by `state`, undoable through `undo`."""

    use_ns = True

    def __init__(self, root_fd: int, state: FaultState, undo: UndoLog | None) -> None:
        self.root = root_fd
        self.state = state
        self.undo = undo
        self._paths: dict[int, str] = {}  # fh -> relative path, for undo records after renames

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
        return _stat_dict(os.stat(_rel(path), dir_fd=self.root, follow_symlinks=False))

    def readdir(self, path: str, fh: int) -> list[str]:
        self._metadata(path)
        fd = os.open(_rel(path), os.O_RDONLY | os.O_DIRECTORY, dir_fd=self.root)
        try:
            return [".", "..", *os.listdir(fd)]
        finally:
            os.close(fd)

    def readlink(self, path: str) -> str:
        self._metadata(path)
        return os.readlink(_rel(path), dir_fd=self.root)

    def _own(self, rel: str) -> None:
        """Give a new file or directory to the process that created it, as a plain filesystem
        would (the daemon runs as root; a mongod user must own its files after unmounting)."""
        uid, gid, _ = mfusepy.fuse_get_context()
        if os.geteuid() == 0 and (uid, gid) != (0, 0):
            os.chown(rel, uid, gid, dir_fd=self.root, follow_symlinks=False)

    def mkdir(self, path: str, mode: int) -> None:
        self._metadata(path)
        os.mkdir(_rel(path), mode, dir_fd=self.root)
        self._own(_rel(path))

    def rmdir(self, path: str) -> None:
        self._metadata(path)
        os.rmdir(_rel(path), dir_fd=self.root)

    def unlink(self, path: str) -> None:
        self._metadata(path)
        os.unlink(_rel(path), dir_fd=self.root)
        if self.undo is not None:
            self.undo.removed(_rel(path))

    def rename(self, old: str, new: str) -> None:
        self._metadata(old)
        os.rename(_rel(old), _rel(new), src_dir_fd=self.root, dst_dir_fd=self.root)
        if self.undo is not None:
            self.undo.renamed(_rel(old), _rel(new))
        for fh, rel in list(self._paths.items()):
            if rel == _rel(old):
                self._paths[fh] = _rel(new)

    def symlink(self, target: str, source: str) -> None:
        self._metadata(target)
        os.symlink(source, _rel(target), dir_fd=self.root)
        self._own(_rel(target))

    def link(self, target: str, source: str) -> None:
        self._metadata(target)
        os.link(_rel(source), _rel(target), src_dir_fd=self.root, dst_dir_fd=self.root)

    def chmod(self, path: str, mode: int) -> None:
        self._metadata(path)
        os.chmod(_rel(path), stat.S_IMODE(mode), dir_fd=self.root)

    def chown(self, path: str, uid: int, gid: int) -> None:
        self._metadata(path)
        os.chown(_rel(path), uid, gid, dir_fd=self.root, follow_symlinks=False)

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> None:
        self._metadata(path)
        if times is None:  # no times given: both become now, as utimensat(2) with NULL
            os.utime(_rel(path), dir_fd=self.root, follow_symlinks=False)
        else:
            os.utime(_rel(path), ns=times, dir_fd=self.root, follow_symlinks=False)

    def statfs(self, path: str) -> dict[str, int]:
        self._metadata(path)
        st = os.fstatvfs(self.root)
        names = ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree",
                 "f_favail", "f_flag", "f_namemax")  # fmt: skip
        return {name: getattr(st, name) for name in names}

    def access(self, path: str, amode: int) -> None:
        self._metadata(path)
        if not os.access(_rel(path), amode, dir_fd=self.root):
            raise mfusepy.FuseOSError(errno.EACCES)

    # -- files -------------------------------------------------------------------------------

    def open(self, path: str, flags: int) -> int:
        self._metadata(path)
        self._admit("open", path)
        with self._changing():
            if self.undo is not None and flags & os.O_TRUNC:
                self.undo.before_create(_rel(path))
                self._truncate_undo(_rel(path), 0)
            # O_DIRECT already kept the kernel's cache out of it; the daemon's own buffers are
            # not aligned as the backing filesystem would demand.
            fh = os.open(_rel(path), flags & ~os.O_DIRECT, dir_fd=self.root)
        self._paths[fh] = _rel(path)
        return fh

    def create(self, path: str, mode: int, fi: Any = None) -> int:
        self._metadata(path)
        self._admit("open", path)
        if self.undo is not None:
            self.undo.before_create(_rel(path))
        fh = os.open(_rel(path), os.O_CREAT | os.O_RDWR, mode, dir_fd=self.root)
        self._own(_rel(path))
        self._paths[fh] = _rel(path)
        return fh

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        self._admit("read", path, size)
        return os.pread(fh, size, offset)

    def _changing(self) -> contextlib.AbstractContextManager[object]:
        """Held around a change and its undo record (see `UndoLog.lock`)."""
        return self.undo.lock if self.undo is not None else contextlib.nullcontext()

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        self._admit("write", path, len(data))
        with self._changing():
            if self.undo is not None:
                self.undo.before_change(self._paths.get(fh, _rel(path)), fh, offset,
                                        offset + len(data))  # fmt: skip
            return os.pwrite(fh, data, offset)

    def truncate(self, path: str, length: int, fh: int | None = None) -> None:
        self._metadata(path)
        self._admit("write", path)
        with self._changing():
            if self.undo is not None:
                self._truncate_undo(_rel(path), length)
            fd = os.open(_rel(path), os.O_WRONLY, dir_fd=self.root)
            try:
                os.ftruncate(fd, length)
            finally:
                os.close(fd)

    def _truncate_undo(self, rel: str, length: int) -> None:
        assert self.undo is not None
        try:
            fd = os.open(rel, os.O_RDONLY, dir_fd=self.root)
        except FileNotFoundError:
            return
        try:
            self.undo.before_truncate(rel, fd, length)
        finally:
            os.close(fd)

    def fallocate(self, path: str, mode: int, offset: int, size: int, fh: int) -> None:
        self._admit("write", path)
        if mode:
            raise mfusepy.FuseOSError(errno.EOPNOTSUPP)
        with self._changing():
            if self.undo is not None:
                self.undo.before_change(self._paths.get(fh, _rel(path)), fh, offset, offset + size)
            os.posix_fallocate(fh, offset, size)

    def fsync(self, path: str, datasync: int, fh: int) -> None:
        self._admit("fsync", path)
        if datasync:
            os.fdatasync(fh)
        else:
            os.fsync(fh)
        if self.undo is not None:
            self.undo.synced(self._paths.get(fh, _rel(path)))

    def flush(self, path: str, fh: int) -> None:
        # close() of a duplicate descriptor: nothing is buffered here, the backing fd stays.
        if self.state.detached:
            raise mfusepy.FuseOSError(errno.EIO)

    def release(self, path: str, fh: int) -> None:
        self._paths.pop(fh, None)
        os.close(fh)

    def fsyncdir(self, path: str, datasync: int, fh: int) -> None:
        self._admit("fsync", path)
