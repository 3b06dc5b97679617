"""A pod's cgroup tree as kubelet's cgroupfs driver lays it out, made in this machine's cgroup v1
blkio hierarchy for the node agent's tests, with a process in the container's cgroup; removed
afterwards."""

from __future__ import annotations

import secrets
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

BLKIO = Path("/sys/fs/cgroup/blkio")


@dataclass
class PodCgroup:
    root: Path  # what the agent is given as its cgroup root
    container: Path
    pod_uid: str
    container_id: str


@contextmanager
def pod_cgroup() -> Iterator[PodCgroup]:
    if not (BLKIO / "blkio.throttle.write_iops_device").exists():
        raise RuntimeError(
            "the node agent's tests need the cgroup v1 blkio hierarchy at " + str(BLKIO)
        )
    root = BLKIO / f"rsdrill-test-{secrets.token_hex(4)}"
    pod_uid, container_id = str(uuid.uuid4()), secrets.token_hex(32)
    container = root / "kubepods" / "burstable" / f"pod{pod_uid}" / container_id
    container.mkdir(parents=True)
    sleeper = subprocess.Popen(["sleep", "600"])
    try:
        (container / "cgroup.procs").write_text(str(sleeper.pid))
        yield PodCgroup(root, container, pod_uid, container_id)
    finally:
        sleeper.kill()
        sleeper.wait(timeout=10)
        for directory in sorted((p for p in root.rglob("*") if p.is_dir()), reverse=True):
            directory.rmdir()
        root.rmdir()
