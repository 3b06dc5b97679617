"""Mount lifecycle: start the daemon, wait for the mount, unmount (lazily if busy), find mounts.

A mount is a daemon process (`python -m rsdrill.faultfs serve ...`) in its own session. It
records itself in `<state_dir>/faultfs.json` and logs to `<state_dir>/faultfs.log`. With an
owner pid it unmounts itself when the owner dies, so a killed run leaves no mount behind even
before `rsdrill recover` runs. `unmount` is idempotent and also clears a dead daemon's mount
("Transport endpoint is not connected").
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from rsdrill.faultfs.compiled import BINARY
from rsdrill.faultfs.control import ControlError, request
from rsdrill.logtail import last_line

FSTYPE = "fuse.rsdrill-faultfs"
STATE_FILE = "faultfs.json"
LOG_FILE = "faultfs.log"
MOUNT_TIMEOUT_S = 15.0
UNMOUNT_TIMEOUT_S = 10.0


class FaultFSError(Exception):
    """A mount or unmount failed; the message says why (and where the log is)."""


@dataclass(frozen=True)
class Mount:
    """A running mount: what it serves, where, its state directory and its daemon's pid."""

    source: Path
    mountpoint: Path
    state_dir: Path
    pid: int


def _unescape(field: str) -> str:
    # /proc/self/mountinfo escapes space, tab, newline and backslash as octal.
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def mounts() -> list[tuple[Path, str]]:
    """(mount point, fstype) of every mount in this namespace."""
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        out.append((Path(_unescape(left.split()[4])), right.split()[0]))
    return out


def faultfs_mounts(under: Path | None = None) -> list[Path]:
    """Mount points of faultfs mounts (dead daemons' included), optionally below `under`."""
    base = None if under is None else Path(os.path.abspath(under))
    return [
        point
        for point, fstype in mounts()
        if fstype == FSTYPE and (base is None or point == base or base in point.parents)
    ]


def is_mounted(mountpoint: Path) -> bool:
    return Path(os.path.abspath(mountpoint)) in faultfs_mounts()


def mount(
    source: Path,
    mountpoint: Path,
    state_dir: Path,
    *,
    owner_pid: int | None = None,
    track_unsynced: bool = False,
    layer: str | None = None,
    passthrough: bool = False,
    mirror: Path | None = None,
    timeout_s: float = MOUNT_TIMEOUT_S,
) -> Mount:
    """Mount the fault-injecting filesystem of `source` on `mountpoint` (may be the same).

    `layer`: `compiled` or `python` (default: compiled where built, see `compiled.py`).
    `passthrough` (compiled layer, not with `track_unsynced`): files opened while no rule is
    set bypass the daemon until closed (docs/storage-faults.md). `mirror`: a second backing
    directory, replica b of a mirrored backing whose replica a is `source` (Python layer only,
    `mirror.py`).

    Returns once the mount answers on its control socket; raises FaultFSError otherwise
    (having stopped the daemon again).
    """
    source, mountpoint = Path(os.path.abspath(source)), Path(os.path.abspath(mountpoint))
    if not source.is_dir():
        raise FaultFSError(f"faultfs: source {source} is not a directory")
    if not mountpoint.is_dir():
        raise FaultFSError(f"faultfs: mount point {mountpoint} is not a directory")
    if is_mounted(mountpoint):
        raise FaultFSError(f"faultfs: {mountpoint} is already mounted")
    if not Path("/dev/fuse").exists():
        raise FaultFSError("faultfs: /dev/fuse is missing (FUSE is not available here)")
    state_dir.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-P", "-m", "rsdrill.faultfs", "serve", str(source), str(mountpoint),
            "--state-dir", str(state_dir)]  # fmt: skip
    if owner_pid is not None:
        argv += ["--owner-pid", str(owner_pid)]
    if track_unsynced:
        argv.append("--track-unsynced")
    if layer is not None:
        argv += ["--layer", layer]
    if passthrough:
        argv.append("--passthrough")
    if mirror is not None:
        if not mirror.is_dir():
            raise FaultFSError(f"faultfs: mirror {mirror} is not a directory")
        argv += ["--mirror", os.path.abspath(mirror)]
    log_path = state_dir / LOG_FILE
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    deadline = time.monotonic() + timeout_s
    while True:
        if process.poll() is not None:
            raise FaultFSError(
                f"faultfs: the daemon for {mountpoint} exited with status {process.returncode}"
                f"{_log_tail(log_path)}"
            )
        if is_mounted(mountpoint):
            try:
                request(mountpoint, {"op": "ping"}, timeout_s=1.0)
                return Mount(source, mountpoint, state_dir, process.pid)
            except ControlError:
                pass
        if time.monotonic() > deadline:
            process.kill()
            process.wait(5)
            detach(mountpoint)
            raise FaultFSError(
                f"faultfs: {mountpoint} was not mounted within {timeout_s:.0f}s"
                f"{_log_tail(log_path)}"
            )
        time.sleep(0.02)


def _log_tail(path: Path) -> str:
    last = last_line(path)
    return f" (see {path}: {last})" if last else f" (see {path})"


def detach(mountpoint: Path) -> None:
    """Unmount, lazily when busy; works for dead daemons' mounts too. No error if it fails."""
    fusermount = shutil.which("fusermount3") or shutil.which("fusermount")
    attempts: list[list[str]] = []
    if fusermount is not None:
        attempts = [[fusermount, "-u", str(mountpoint)], [fusermount, "-u", "-z", str(mountpoint)]]
    attempts.append(["umount", "-l", str(mountpoint)])
    for argv in attempts:
        if not is_mounted(mountpoint):
            return
        subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=10,
                       check=False)  # fmt: skip


def _daemons() -> dict[Path, list[int]]:
    """Every running faultfs daemon: mount point → the pids serving it, found by command line:
    its daemon first, then its compiled data path (`rsdrill-faultfs SOURCE MOUNTPOINT`), which
    outlives a killed daemon by a moment (the mount answers until it is gone too)."""
    found: dict[Path, list[int]] = {}
    data_paths: dict[Path, list[int]] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"rsdrill.faultfs" in args and b"serve" in args:
            at = args.index(b"serve") + 2  # serve SOURCE MOUNTPOINT ...
            if at < len(args):
                found.setdefault(Path(os.fsdecode(args[at])), []).append(int(proc.name))
        elif os.path.basename(args[0]) == BINARY.encode() and len(args) > 2:
            point = Path(os.path.abspath(os.fsdecode(args[2])))
            data_paths.setdefault(point, []).append(int(proc.name))
    for point, pids in data_paths.items():
        found.setdefault(point, []).extend(pids)
    return found


def daemon_pid(mountpoint: Path) -> int | None:
    """The pid of the daemon serving `mountpoint` (its data path's, when only that is left)."""
    pids = _daemons().get(Path(os.path.abspath(mountpoint)))
    return pids[0] if pids else None


def unmount(mountpoint: Path, timeout_s: float = UNMOUNT_TIMEOUT_S) -> str:
    """Unmount and stop the daemon; a line saying what was done. Idempotent."""
    mountpoint = Path(os.path.abspath(mountpoint))
    pids = _daemons().get(mountpoint, [])
    was_mounted = is_mounted(mountpoint)
    if was_mounted:
        detach(mountpoint)
        if is_mounted(mountpoint):
            raise FaultFSError(f"faultfs: could not unmount {mountpoint}")
    # Lazily unmounted while files were still open: the daemon serves them until they are
    # closed. Past the deadline it is stopped; those files then fail with ENOTCONN.
    if pids and not _exit(mountpoint, pids, timeout_s):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _exit(mountpoint, pids, UNMOUNT_TIMEOUT_S)
    if not was_mounted:
        return f"{mountpoint}: no faultfs mounted" + (
            f"; its daemon {pids[0]} stopped" if pids else ""
        )
    return f"{mountpoint}: faultfs unmounted"


def _exit(mountpoint: Path, pids: list[int], timeout_s: float) -> bool:
    """Wait for the processes serving the mount to be gone (reaped, when this process started
    them)."""
    deadline = time.monotonic() + timeout_s
    while set(_daemons().get(mountpoint, [])) & set(pids):
        # A daemon this process started stays a zombie until waited for.
        for pid in pids:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def unmount_all(under: Path, timeout_s: float = UNMOUNT_TIMEOUT_S) -> list[str]:
    """Unmount every faultfs mount below `under` (e.g. a sandbox directory) and stop every
    daemon serving one, also a daemon whose mount is already gone (lazily unmounted after its
    owner died, it lingers while files stay open); what was done."""
    base = Path(os.path.abspath(under))
    orphans = [p for p in _daemons() if p == base or base in p.parents]
    return [unmount(p, timeout_s) for p in sorted({*faultfs_mounts(base), *orphans})]
