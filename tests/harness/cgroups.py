"""A pod's cgroup tree as kubelet's cgroupfs driver lays it out, made in this machine's cgroup v1
blkio hierarchy for the node agent's and the SSM cap's tests, with a process in the container's
cgroup; removed afterwards. `write_seconds` measures direct writes from inside a cgroup."""

from __future__ import annotations

import secrets
import subprocess
import sys
import uuid
from collections.abc import Iterator, Mapping, Sequence
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
def pod_cgroups(
    containers: Mapping[str, str], command: Sequence[str] = ("sleep", "600")
) -> Iterator[tuple[Path, dict[str, Path]]]:
    """The tree of one cgroup root with a pod per (pod uid → container id), `command` running
    in each container's cgroup: the root (what the agent is given) and each container's
    directory by pod uid."""
    if not (BLKIO / "blkio.throttle.write_iops_device").exists():
        raise RuntimeError(
            "the node agent's tests need the cgroup v1 blkio hierarchy at " + str(BLKIO)
        )
    root = BLKIO / f"rsdrill-test-{secrets.token_hex(4)}"
    made = {uid: root / "kubepods" / "burstable" / f"pod{uid}" / cid
            for uid, cid in containers.items()}  # fmt: skip
    processes: list[subprocess.Popen[bytes]] = []
    try:
        for container in made.values():
            container.mkdir(parents=True)
            processes.append(subprocess.Popen(list(command)))
            (container / "cgroup.procs").write_text(str(processes[-1].pid))
        yield root, made
    finally:
        for process in processes:
            process.kill()
            process.wait(timeout=10)
        for directory in sorted((p for p in root.rglob("*") if p.is_dir()), reverse=True):
            directory.rmdir()
        root.rmdir()


@contextmanager
def pod_cgroup(command: Sequence[str] = ("sleep", "600")) -> Iterator[PodCgroup]:
    """One pod's tree, with `command` running in its container's cgroup."""
    pod_uid, container_id = str(uuid.uuid4()), secrets.token_hex(32)
    with pod_cgroups({pod_uid: container_id}, command) as (root, made):
        yield PodCgroup(root, made[pod_uid], pod_uid, container_id)


# Joins the cgroup, then writes N blocks of 4 KiB with O_DIRECT|O_DSYNC (each one a device
# write, which blkio throttles); prints the seconds they took.
_WRITER = """
import mmap, os, sys, time
open(sys.argv[1], "w").write(str(os.getpid()))
fd = os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT | os.O_DIRECT | os.O_DSYNC, 0o600)
block = mmap.mmap(-1, 4096)
started = time.monotonic()
for i in range(int(sys.argv[3])):
    os.pwrite(fd, block, i * 4096)
print(time.monotonic() - started)
"""


def write_seconds(cgroup: Path, directory: Path, writes: int) -> float:
    """Seconds `writes` direct 4 KiB writes to a file in `directory` take from `cgroup`."""
    done = subprocess.run(
        [sys.executable, "-c", _WRITER, str(cgroup / "cgroup.procs"), str(directory / "data"),
         str(writes)],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return float(done.stdout)
