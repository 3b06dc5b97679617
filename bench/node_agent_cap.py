"""The node agent's true IOPS cap (iops-throttle, Kubernetes engine native) on this machine's
cgroup v1 blkio: a pod-shaped cgroup tree (tests/harness/cgroups.py) whose container writes 4 KiB
blocks with O_DIRECT|O_DSYNC for a few seconds, uncapped and then capped at each `--wiops` by
`iocap.apply` (what the agent does on a node), then cleared. The device write IOs the cgroup
issued (blkio.throttle.io_serviced, which counts each write's flush too) per second against
the cap. Target: within 15 % of the cap once capped; back to uncapped after the clear.

Usage (root): python bench/node_agent_cap.py [--wiops 20,50,100] [--seconds 4]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from rsdrill.platforms.kubernetes import iocap
from tests.harness.cgroups import pod_cgroup

# Joins the cgroup, writes 4 KiB O_DIRECT|O_DSYNC blocks for argv[3] seconds; prints how many.
_WRITER = """
import mmap, os, sys, time
open(sys.argv[1], "w").write(str(os.getpid()))
fd = os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT | os.O_DIRECT | os.O_DSYNC, 0o600)
block = mmap.mmap(-1, 4096)
end, n = time.monotonic() + float(sys.argv[3]), 0
while time.monotonic() < end:
    os.pwrite(fd, block, (n % 256) * 4096)
    n += 1
print(n)
"""


def _device_writes(cgroup: Path, device: str) -> int:
    for line in (cgroup / "blkio.throttle.io_serviced").read_text().splitlines():
        fields = line.split()
        if len(fields) == 3 and fields[0] == device and fields[1] == "Write":
            return int(fields[2])
    return 0


def _measure(cgroup: Path, device: str, data: Path, seconds: float) -> tuple[float, float]:
    """(writes/s the program made, device write IOs/s the cgroup issued)."""
    before = _device_writes(cgroup, device)
    done = subprocess.run(
        [sys.executable, "-c", _WRITER, str(cgroup / "cgroup.procs"), str(data), str(seconds)],
        capture_output=True, text=True, check=True, timeout=seconds + 60,
    )  # fmt: skip
    return int(done.stdout) / seconds, (_device_writes(cgroup, device) - before) / seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--wiops", default="20,50,100")
    parser.add_argument("--seconds", type=float, default=4.0)
    args = parser.parse_args()
    caps = [int(c) for c in args.wiops.split(",")]
    failed = 0
    with pod_cgroup() as pod, tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        data, state = Path(tmp) / "data", Path(tmp) / "state"
        device = iocap.volume_device(pod.container, tmp)
        free, free_io = _measure(pod.container, device, data, args.seconds)
        print(f"device {device}, cgroup v1 blkio, {args.seconds:g} s each")
        print(f"uncapped: {free:8.1f} writes/s, {free_io:8.1f} device write IOs/s")
        for cap in caps:
            iocap.apply(pod.container, device, iocap.Limits(wiops=cap), state)
            made, issued = _measure(pod.container, device, data, args.seconds)
            iocap.clear(pod.container, device, state)
            ok = abs(issued - cap) <= 0.15 * cap
            failed += not ok
            print(f"wiops={cap:<4}: {made:8.1f} writes/s, {issued:8.1f} device write IOs/s "
                  f"({issued / cap:.2f} x the cap) {'PASS' if ok else 'FAIL'}")  # fmt: skip
        after, after_io = _measure(pod.container, device, data, args.seconds)
        ok = after_io > 0.5 * free_io
        failed += not ok
        print(f"cleared : {after:8.1f} writes/s, {after_io:8.1f} device write IOs/s "
              f"{'PASS' if ok else 'FAIL'}")  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
