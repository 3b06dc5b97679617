"""`disk-fill` on a sandbox or local member: its data filesystem filled to `fill_percent` by a
real file of rsdrill's, then freed.

The sandbox members of a run with disk-fill have their data directories on small filesystems
of their own (a tmpfs of `DISK_MB` each, mounted over `data/` before they start), so filling
one fills only that member's disk, as on a host whose volume runs full. A local member's
dbpath must be such a filesystem already (a tmpfs, loop device or volume mounted there, which
the user sized): rsdrill fills no filesystem that is not the member's alone, and none that is
a FUSE view of another (faultfs passes its free space through from the disk under it). Full
(100 %), the member's next write or group commit fails with ENOSPC, and mongod (and the
emulator) logs it and exits (status 14, the emulator's event `fatal`). Revert deletes the file
and restarts the member on its data.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rsdrill.platforms.base import (
    InjectionError,
    Injector,
    MachineTarget,
    ProcessHosts,
    TargetError,
)

if TYPE_CHECKING:
    from rsdrill.faults import DiskFillFault

DISK_MB = 64
FILLER = "rsdrill-disk-fill"
_FSTYPE = "tmpfs"
_SOURCE = "rsdrill-disk"


def small_disk_mounts(directory: Path) -> list[Path]:
    """The members' small data filesystems under a sandbox directory."""
    root = str(Path(os.path.abspath(directory)))
    found = []
    for line in Path("/proc/mounts").read_text().splitlines():
        source, target, fstype = line.split()[:3]
        if source == _SOURCE and fstype == _FSTYPE and target.startswith(root + "/"):
            found.append(Path(target.replace("\\040", " ")))
    return found


def own_disk_problem(dbpath: Path) -> str | None:
    """Why `dbpath` is not a filesystem of its own that disk-fill may fill (None: it is)."""
    path = Path(os.path.abspath(dbpath))
    if not os.path.ismount(path):
        return (f"{path} is not a mount point: put it on a filesystem of its own (e.g. "
                f"`mount -t tmpfs -o size=1g tmpfs {path}` before the member starts)")  # fmt: skip
    fstype = ""
    for line in Path("/proc/mounts").read_text().splitlines():
        target, kind = line.split()[1:3]
        if target.replace("\\040", " ") == str(path):
            fstype = kind  # the last mount on a path is the one in force
    if fstype.startswith("fuse"):
        return f"{path} is a {fstype} mount, whose free space is that of the disk under it"
    return None


def mount_small_disk(data: Path) -> None:
    """A DISK_MB filesystem over `data` (created if missing)."""
    data.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", _FSTYPE, "-o", f"size={DISK_MB}m", _SOURCE, str(data)],
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        raise TargetError(f"disk-fill: cannot mount a {DISK_MB} MiB disk on {data}: "
                          f"{done.stderr.strip()}")  # fmt: skip


def unmount_small_disks(directory: Path) -> list[Path]:
    """Unmount every member's small disk under `directory` (members stopped first)."""
    gone = small_disk_mounts(directory)
    for mountpoint in gone:
        subprocess.run(["umount", "-l", str(mountpoint)], capture_output=True)
    return gone


def free(action: dict[str, Any]) -> str:
    """Revert action `disk-fill-free`: the filler deleted."""
    path = Path(action["path"])
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
        return f"{action['host']}: {path} deleted, its disk freed"
    return f"{action['host']}: no filler left"


def _fill_up(fd: int) -> None:
    """Write to `fd` until the filesystem is full (ENOSPC), in ever smaller pieces."""
    for chunk in (1 << 20, 1 << 12):
        block = bytes(chunk)
        while True:
            try:
                os.write(fd, block)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                break


class DiskFill:
    kind = "disk-fill"

    def __init__(self, hosts: ProcessHosts, host: str, data: Path, percent: float,
                 restart_action: dict[str, object]) -> None:  # fmt: skip
        self.hosts = hosts
        self.target = host
        self.data = data
        self.percent = percent
        self.path = data.absolute() / FILLER  # journaled: `recover` may run elsewhere
        self.restart = restart_action

    def describe(self) -> str:
        return f"fill {self.target}'s data disk to {self.percent:g} % ({self.path})"

    def revert_action(self) -> dict[str, Any] | None:
        return {"action": "disk-fill-free", "host": self.target, "path": str(self.path),
                "restart": self.restart}  # fmt: skip

    def inject(self) -> None:
        st = os.statvfs(self.data)
        total = st.f_blocks * st.f_frsize
        used = total - st.f_bavail * st.f_frsize
        size = max(int(total * self.percent / 100) - used, 0)
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        except OSError as exc:
            raise InjectionError(f"disk-fill on {self.target}: {exc}") from exc
        try:
            if self.percent >= 100:
                _fill_up(fd)  # whatever the member writes meanwhile, to the last block
            elif size:
                os.posix_fallocate(fd, 0, size)
        except OSError as exc:
            raise InjectionError(f"disk-fill on {self.target}: {exc}") from exc
        finally:
            os.close(fd)

    def verify(self, timeout_s: float) -> bool:
        st = os.statvfs(self.data)
        used = 1 - st.f_bavail / st.f_blocks if st.f_blocks else 1.0
        return used * 100 >= min(self.percent, 100) - 1

    def revert(self) -> None:
        free(self.revert_action() or {})
        self.hosts.start(self.target, wipe=False)  # it died of ENOSPC, as mongod does


def disk_fill(target: MachineTarget, fault: DiskFillFault, host: str) -> Injector:
    """disk-fill of a member's own data disk (the sandbox gives it one for such runs; a local
    member's dbpath is one)."""
    data = getattr(target, "small_disk", lambda _: None)(host)
    if data is None:
        raise InjectionError(f"disk-fill: {host} has no data disk of its own")
    return DiskFill(target.hosts, host, data, fault.fill_percent,
                    target.hosts.restart_action(host, wipe=False))  # fmt: skip
