"""Make one backing replica's tree equal another's: what a mirrored mount (`mirror.py`) does
to bring a degraded replica back, in the background, and what `rsdrill recover` does offline
when the mount is gone.

Paths are relative to the two replicas' root descriptors. Files are copied in place (the
descriptors a mount holds open on them stay valid), with their mode and owner; whatever the
source no longer has is removed. Hard links are copied as separate files. Once a file is
copied, what is written to it later is copied by byte range (`sync_changes`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from dataclasses import dataclass

_CHUNK = 1 << 20

Spans = list[tuple[int, int]] | None
"""What changed in one path: the byte ranges (start, end) written, or None for anything else
(created, removed, renamed, truncated: the whole path is copied again)."""


@dataclass
class Copied:
    """What a resync wrote: files copied, their bytes, entries removed."""

    files: int = 0
    bytes: int = 0
    removed: int = 0


def _lstat(root: int, rel: str) -> os.stat_result | None:
    try:
        return os.stat(rel, dir_fd=root, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _remove(root: int, rel: str, copied: Copied) -> None:
    st = _lstat(root, rel)
    if st is None:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(rel, dir_fd=root)
    else:
        os.unlink(rel, dir_fd=root)
    copied.removed += 1


def _attributes(source: os.stat_result, root: int, rel: str) -> None:
    os.chmod(rel, stat.S_IMODE(source.st_mode), dir_fd=root)
    os.chown(rel, source.st_uid, source.st_gid, dir_fd=root, follow_symlinks=False)


def _copy_file(source_root: int, target_root: int, rel: str, copied: Copied) -> None:
    try:
        src = os.open(rel, os.O_RDONLY, dir_fd=source_root)
    except FileNotFoundError:  # removed since it was listed: the next pass removes it here
        return
    try:
        dst = os.open(rel, os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=target_root)
        try:
            offset = 0
            while chunk := os.pread(src, _CHUNK, offset):
                os.pwrite(dst, chunk, offset)
                offset += len(chunk)
            os.ftruncate(dst, offset)
            os.fsync(dst)
            st = os.fstat(src)
            os.fchmod(dst, stat.S_IMODE(st.st_mode))
            os.fchown(dst, st.st_uid, st.st_gid)
        finally:
            os.close(dst)
    finally:
        os.close(src)
    copied.files += 1
    copied.bytes += offset


def sync_path(source_root: int, target_root: int, rel: str, copied: Copied) -> None:
    """Make `rel` in the target what it is in the source (a directory: its whole tree)."""
    st = _lstat(source_root, rel)
    if st is None:
        _remove(target_root, rel, copied)
        return
    parent = os.path.dirname(rel)
    if parent and _lstat(target_root, parent) is None:
        sync_path(source_root, target_root, parent, copied)  # copies `rel` with it
        return
    there = _lstat(target_root, rel)
    if there is not None and stat.S_IFMT(there.st_mode) != stat.S_IFMT(st.st_mode):
        _remove(target_root, rel, copied)
        there = None
    if stat.S_ISDIR(st.st_mode):
        if there is None:
            os.mkdir(rel, 0o700, dir_fd=target_root)
        _attributes(st, target_root, rel)
        _sync_children(source_root, target_root, rel, copied)
    elif stat.S_ISLNK(st.st_mode):
        if there is not None:
            os.unlink(rel, dir_fd=target_root)
        os.symlink(os.readlink(rel, dir_fd=source_root), rel, dir_fd=target_root)
    elif stat.S_ISREG(st.st_mode):
        _copy_file(source_root, target_root, rel, copied)
    # Sockets, pipes and devices have no content to keep: a data directory has none.


def _names(root: int, rel: str) -> set[str]:
    try:
        fd = os.open(rel, os.O_RDONLY | os.O_DIRECTORY, dir_fd=root)
    except (FileNotFoundError, NotADirectoryError):
        return set()
    try:
        return set(os.listdir(fd))
    finally:
        os.close(fd)


def _sync_children(source_root: int, target_root: int, rel: str, copied: Copied) -> None:
    wanted = _names(source_root, rel)
    for name in sorted(_names(target_root, rel) - wanted):
        _remove(target_root, _join(rel, name), copied)
    for name in sorted(wanted):
        sync_path(source_root, target_root, _join(rel, name), copied)


def _join(rel: str, name: str) -> str:
    return name if rel == "." else f"{rel}/{name}"


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _copy_spans(source_root: int, target_root: int, rel: str, spans: list[tuple[int, int]],
                copied: Copied) -> bool:  # fmt: skip
    """Copy the byte ranges of a file both replicas have; False when one has it not."""
    try:
        src = os.open(rel, os.O_RDONLY, dir_fd=source_root)
    except FileNotFoundError:
        return False
    try:
        try:
            dst = os.open(rel, os.O_WRONLY, dir_fd=target_root)
        except FileNotFoundError:
            return False
        try:
            for start, end in _merged(spans):
                offset = start
                while offset < end and (chunk := os.pread(src, min(_CHUNK, end - offset), offset)):
                    os.pwrite(dst, chunk, offset)
                    offset += len(chunk)
                copied.bytes += offset - start
            os.ftruncate(dst, os.fstat(src).st_size)
            os.fsync(dst)
        finally:
            os.close(dst)
    finally:
        os.close(src)
    copied.files += 1
    return True


def sync_changes(source_root: int, target_root: int, changes: dict[str, Spans],
                 copied: Copied) -> None:  # fmt: skip
    """Copy what changed in the source since the target last took it: each path's written
    byte ranges, or the whole path (parents first)."""
    for rel, spans in sorted(changes.items()):
        if spans is None or not _copy_spans(source_root, target_root, rel, spans, copied):
            sync_path(source_root, target_root, rel, copied)


def sync_tree(source: str, target: str) -> Copied:
    """Make directory `target` equal directory `source` (offline: nothing may change them)."""
    copied = Copied()
    with contextlib.ExitStack() as fds:
        roots = [os.open(p, os.O_RDONLY | os.O_DIRECTORY) for p in (source, target)]
        for fd in roots:
            fds.callback(os.close, fd)
        sync_path(roots[0], roots[1], ".", copied)
    return copied
