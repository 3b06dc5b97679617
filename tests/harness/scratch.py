"""Where the suite's scratch files go: memory where the machine has room, the disk where a test
needs a block device.

Every sandbox member fsyncs its SQLite file on each journaled write, the Kubernetes tests' etcd
on each of its own, and the suite starts some thousand members: on this machine's disk those
fsyncs cost the kernel's journal threads about 140 s of CPU per run and made the members'
write latency move with the disk's from one minute to the next. What the suite tests does not
need them on a disk: a power loss is faultfs's (it keeps what was not synced itself) and a
kill -9 loses nothing the page cache holds. Measured in one full run each (2 cores): 2,157
core-seconds busy and 1,378 s on tmpfs against 2,459 and 1,502 on ext4.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

SHM = Path("/dev/shm")
# A full run leaves about 1.3 GB there at its peak; room for that several times over.
MIN_FREE_BYTES = 8 << 30
# The scratch root the suite would have used without memory: what a test that needs a block
# device gets (set by the controlling process, inherited by the xdist workers).
DISK_ROOT_ENV = "RSDRILL_TEST_DISK_TMPDIR"


def _is_tmpfs(path: Path) -> bool:
    with open("/proc/self/mounts") as mounts:
        return any(
            fields[1] == str(path) and fields[2] == "tmpfs"
            for fields in (line.split() for line in mounts)
        )


def memory_root() -> Path | None:
    """A directory of ours on /dev/shm for the run's scratch files, or None: TMPDIR chosen by
    the caller, no tmpfs there, too little room, or a directory of that name that is not ours
    alone (/dev/shm is everybody's)."""
    if os.environ.get("TMPDIR") or not _is_tmpfs(SHM):
        return None
    room = os.statvfs(SHM)
    if room.f_bavail * room.f_frsize < MIN_FREE_BYTES:
        return None
    root = SHM / f"rsdrill-tests-{os.getuid()}"
    with contextlib.suppress(FileExistsError):
        root.mkdir(mode=0o700)
    found = root.lstat()
    mine = found.st_uid == os.getuid() and not found.st_mode & 0o077
    return root if stat.S_ISDIR(found.st_mode) and mine else None


def pytest_configure(config: pytest.Config) -> None:
    """Scratch files of the run and of what it starts go to memory, when it has room: set once,
    in the process that starts the xdist workers (they inherit TMPDIR); a --basetemp stands."""
    if hasattr(config, "workerinput") or config.option.basetemp is not None:
        return
    root = memory_root()
    if root is not None:
        os.environ[DISK_ROOT_ENV] = tempfile.gettempdir()
        os.environ["TMPDIR"] = str(root)
        tempfile.tempdir = None  # gettempdir() reads TMPDIR again


@pytest.fixture
def disk_tmp_path() -> Iterator[Path]:
    """A fresh directory on the disk, for a test of block-device behaviour (cgroup I/O limits,
    O_DIRECT's alignment): removed after the test."""
    root = os.environ.get(DISK_ROOT_ENV) or tempfile.gettempdir()
    path = Path(tempfile.mkdtemp(prefix="rsdrill-disk-", dir=root))
    yield path
    shutil.rmtree(path, ignore_errors=True)
