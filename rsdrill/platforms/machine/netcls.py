"""Member processes tagged for the packet filter (network partitions on this machine).

Every member of a replica set on one machine talks over loopback, and so do its clients: the
addresses cannot tell a member's packets from a client's. What can is the process that sends
them. Each member process is placed in its own net_cls cgroup (cgroup v1), whose class id every
socket of the process then carries, including the sockets it opened before it was placed (the
kernel re-tags them on the move), so a running mongod needs no restart. nftables reads the tag
of a sent packet as `meta cgroup`. Any process left outside these cgroups is a client.

The net_cls hierarchy is used where it is mounted already, or mounted at `OWN_MOUNT` and
unmounted again once the last member is released.
"""

from __future__ import annotations

import errno
import fcntl
import os
import subprocess
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

# "RD" in the high half; the low half is the member's port (a port is never 0).
CLASS_BASE = 0x52440000
# A connection a process that is not a member opened to a member: "RC" and the member's port.
# Per port, so that a partition forgets only its own members' connections (`client_mark`).
CLIENT_BASE = 0x52430000
OWN_MOUNT = Path("/run/rsdrill/net_cls")
# Held while cgroups are created, filled or removed and the hierarchy (un)mounted: runs on the
# same machine must not unmount it under each other.
_LOCK_DIR = OWN_MOUNT.parent
GROUP = "rsdrill"


class NetClsError(Exception):
    """The net_cls cgroups cannot be set up or released."""


def _port(port: int) -> int:
    if not 0 < port < 0x10000:
        raise NetClsError(f"port {port} is out of range")
    return port


def class_id(port: int) -> int:
    """The class id of the member listening on `port`."""
    return CLASS_BASE | _port(port)


def client_mark(port: int) -> int:
    """The conntrack mark of a client's connection to the member listening on `port`."""
    return CLIENT_BASE | _port(port)


def hierarchy() -> Path | None:
    """Where the net_cls hierarchy is mounted, if anywhere."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return None
    for line in mounts:
        fields = line.split()
        if len(fields) >= 4 and fields[2] == "cgroup" and "net_cls" in fields[3].split(","):
            return Path(fields[1].replace("\\040", " "))
    return None


def _mount() -> Path:
    found = hierarchy()
    if found is not None:
        return found
    OWN_MOUNT.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "cgroup", "-o", "net_cls", "rsdrill-net_cls", str(OWN_MOUNT)],
        capture_output=True, text=True, timeout=10, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        reason = done.stderr.strip() or f"exit status {done.returncode}"
        raise NetClsError(f"cannot mount the net_cls cgroup hierarchy (needs root): {reason}")
    return OWN_MOUNT


@contextmanager
def _locked() -> Iterator[None]:
    _LOCK_DIR.mkdir(parents=True, exist_ok=True)
    fd = os.open(_LOCK_DIR, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def place(pid: int, port: int) -> None:
    """Put process `pid` (the member listening on `port`) in that member's class."""
    with _locked():
        group = _mount() / GROUP / str(port)
        try:
            group.mkdir(parents=True, exist_ok=True)
            (group / "net_cls.classid").write_text(f"{class_id(port)}\n")
            (group / "cgroup.procs").write_text(f"{pid}\n")
        except OSError as exc:
            if exc.errno == errno.ESRCH:
                raise NetClsError(f"process {pid} (port {port}) is gone") from exc
            raise NetClsError(f"cannot place process {pid} in {group}: {exc}") from exc


def rejoin(pid: int, port: int) -> bool:
    """Put a restarted member's new process in its class if a partition still holds one for
    its port (without creating it: a partition healed meanwhile leaves nothing behind)."""
    with _locked():
        root = hierarchy()
        if root is None:
            return False
        try:
            (root / GROUP / str(port) / "cgroup.procs").write_text(f"{pid}\n")
        except FileNotFoundError:
            return False
        except OSError as exc:
            if exc.errno == errno.ESRCH:
                return False
            raise NetClsError(
                f"cannot place process {pid} in the class of port {port}: {exc}"
            ) from exc
    return True


def placed_pids(port: int) -> list[int]:
    """The processes now in the class of the member on `port`."""
    root = hierarchy()
    if root is None:
        return []
    try:
        text = (root / GROUP / str(port) / "cgroup.procs").read_text()
    except OSError:
        return []
    return [int(line) for line in text.split()]


def release(ports: Iterable[int]) -> list[str]:
    """Move the processes of the members on `ports` back to the hierarchy's root (class 0) and
    remove their cgroups; once none is left, unmount the hierarchy if rsdrill mounted it.
    Idempotent; one line per thing undone."""
    with _locked():
        return _release(ports)


def _release(ports: Iterable[int]) -> list[str]:
    root = hierarchy()
    if root is None:
        return []
    done: list[str] = []
    base = root / GROUP
    for port in sorted(set(ports)):
        group = base / str(port)
        if not group.is_dir():
            continue
        for pid in (group / "cgroup.procs").read_text().split():
            try:
                (root / "cgroup.procs").write_text(f"{pid}\n")
            except OSError as exc:
                if exc.errno != errno.ESRCH:  # exited meanwhile: nothing to move
                    raise NetClsError(f"cannot move process {pid} out of {group}: {exc}") from exc
        _rmdir(group)
        done.append(f"untagged the member on port {port}")
    if base.is_dir() and not any(p.is_dir() for p in base.iterdir()):
        _rmdir(base)
    if root == OWN_MOUNT and not any(p.is_dir() for p in root.iterdir()):
        umount = subprocess.run(
            ["umount", str(OWN_MOUNT)], capture_output=True, text=True, timeout=10, check=False
        )
        if umount.returncode != 0:
            raise NetClsError(f"cannot unmount {OWN_MOUNT}: {umount.stderr.strip()}")
        os.rmdir(OWN_MOUNT)
        done.append(f"unmounted {OWN_MOUNT}")
    return done


def tagged_ports() -> list[int]:
    """The ports of the members that have a class now."""
    root = hierarchy()
    base = root / GROUP if root is not None else None
    if base is None or not base.is_dir():
        return []
    return sorted(int(p.name) for p in base.iterdir() if p.is_dir() and p.name.isdigit())


def _rmdir(path: Path) -> None:
    try:
        path.rmdir()
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise NetClsError(f"cannot remove cgroup {path}: {exc}") from exc
