"""A true IOPS / bandwidth cap on one container's data volume: the container's cgroup limits for
the volume's block device, `io.max` (cgroup v2) or `blkio.throttle.*` (v1), as the node agent
(`nodeagent.py`) writes them on the node. The limits in force before are kept in a state file
first, so clearing restores them exactly, however often it runs.

Found on the node from what the API server knows of the pod: its UID and the container's ID
name the cgroup (kubelet's cgroupfs and systemd drivers both put them in the directory names),
and the mount of the volume's path inside a process of that cgroup names the device (a
partition is throttled through its disk, which is what the kernel accepts).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

_V1_FILES = {
    "riops": "blkio.throttle.read_iops_device",
    "wiops": "blkio.throttle.write_iops_device",
    "rbps": "blkio.throttle.read_bps_device",
    "wbps": "blkio.throttle.write_bps_device",
}
_KEYS = ("rbps", "wbps", "riops", "wiops")
_SEARCH_DEPTH = 6


class CapError(Exception):
    """The cap cannot be placed or removed; the message says why."""


@dataclass(frozen=True)
class Limits:
    """Per-second limits; None: no limit."""

    riops: int | None = None
    wiops: int | None = None
    rbps: int | None = None
    wbps: int | None = None

    def given(self) -> dict[str, int]:
        return {k: v for k, v in asdict(self).items() if v is not None}


def cgroup_version(root: Path) -> int:
    """2 for a cgroup v2 directory, 1 for a cgroup v1 blkio one."""
    if (root / "cgroup.controllers").exists():
        return 2
    if (root / _V1_FILES["riops"]).exists():
        return 1
    raise CapError(f"{root} is neither a cgroup v2 hierarchy nor a cgroup v1 blkio one")


def find_cgroup(root: Path, pod_uid: str, container_id: str) -> Path:
    """The container's cgroup under `root`: a directory naming the pod's UID after `pod` (with
    dashes or, for the systemd driver, underscores: `pod<uid>`, `kubepods-pod<uid>.slice`),
    and under it the one naming the container's ID. `pod` first: a bare UID could be found
    inside a container's ID."""
    forms = (f"pod{pod_uid}", f"pod{pod_uid.replace('-', '_')}")
    for pod_dir in _dirs(root, _SEARCH_DEPTH):
        if any(form in pod_dir.name for form in forms):
            for candidate in _dirs(pod_dir, 2):
                if container_id and container_id in candidate.name:
                    return candidate
            raise CapError(f"container {container_id[:12]} has no cgroup under {pod_dir}")
    raise CapError(f"pod {pod_uid} has no cgroup under {root} (is it on this node?)")


def _dirs(top: Path, depth: int) -> list[Path]:
    found: list[Path] = []
    layer = [top]
    for _ in range(depth):
        layer = [d for parent in layer for d in sorted(parent.iterdir()) if d.is_dir()]
        found += layer
    return found


def volume_device(cgroup: Path, volume_path: str, proc: Path = Path("/proc")) -> str:
    """MAJ:MIN of the block device holding `volume_path` as a process of the cgroup sees it
    (the disk, for a partition)."""
    pids = (cgroup / "cgroup.procs").read_text().split()
    if not pids:
        raise CapError(f"no process in {cgroup}: is the container running?")
    best, device = -1, ""
    for line in (proc / pids[0] / "mountinfo").read_text().splitlines():
        fields = line.split()
        mount_point, majmin = fields[4], fields[2]
        inside = volume_path == mount_point or volume_path.startswith(mount_point.rstrip("/") + "/")
        if inside and len(mount_point) > best:
            best, device = len(mount_point), majmin
    if not device or device.startswith("0:"):
        raise CapError(f"{volume_path} is not on a block device in that container ({device})")
    sys_dev = Path("/sys/dev/block") / device
    if (sys_dev / "partition").exists():
        device = (sys_dev.resolve().parent / "dev").read_text().strip()
    return device


def _read(cgroup: Path, version: int, device: str) -> dict[str, int | None]:
    """The device's limits in force (None: none)."""
    now: dict[str, int | None] = dict.fromkeys(_KEYS)
    if version == 2:
        for line in (cgroup / "io.max").read_text().splitlines():
            majmin, *pairs = line.split()
            if majmin == device:
                for key, value in (p.split("=", 1) for p in pairs):
                    now[key] = None if value == "max" else int(value)
        return now
    for key, name in _V1_FILES.items():
        for line in (cgroup / name).read_text().splitlines():
            majmin, value = line.split()
            if majmin == device:
                now[key] = int(value) or None
    return now


def _write(cgroup: Path, version: int, device: str, limits: dict[str, int | None]) -> None:
    if version == 2:
        pairs = " ".join(f"{k}={'max' if limits[k] is None else limits[k]}" for k in _KEYS)
        (cgroup / "io.max").write_text(f"{device} {pairs}\n")
        return
    for key, name in _V1_FILES.items():
        # v1 removes a device's rule when it is given 0.
        (cgroup / name).write_text(f"{device} {limits[key] or 0}\n")


def _state_file(state_dir: Path, cgroup: Path, device: str) -> Path:
    return state_dir / (str(cgroup).strip("/").replace("/", "_") + f"@{device}.json")


def apply(cgroup: Path, device: str, limits: Limits, state_dir: Path) -> dict[str, object]:
    """Cap the cgroup's I/O on `device`; the previous limits are kept for `clear`."""
    version = cgroup_version(cgroup)
    state = _state_file(state_dir, cgroup, device)
    previous = _read(cgroup, version, device)
    if not state.exists():  # a second apply keeps the limits from before the first
        state_dir.mkdir(parents=True, exist_ok=True)
        state.write_text(json.dumps(previous))
        os.chmod(state, 0o600)
    _write(cgroup, version, device, {**dict.fromkeys(_KEYS), **limits.given()})
    return {"cgroup": str(cgroup), "device": device, "cgroup_version": version,
            "limits": _read(cgroup, version, device)}  # fmt: skip


def clear(cgroup: Path, device: str, state_dir: Path) -> dict[str, object]:
    """Restore the limits from before `apply` (none when no state was kept). Idempotent."""
    version = cgroup_version(cgroup)
    state = _state_file(state_dir, cgroup, device)
    previous = json.loads(state.read_text()) if state.exists() else dict.fromkeys(_KEYS)
    _write(cgroup, version, device, previous)
    state.unlink(missing_ok=True)
    return {"cgroup": str(cgroup), "device": device, "cgroup_version": version,
            "limits": _read(cgroup, version, device)}  # fmt: skip


def current(cgroup: Path, device: str) -> dict[str, int | None]:
    return _read(cgroup, cgroup_version(cgroup), device)
