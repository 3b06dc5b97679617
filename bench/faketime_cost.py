"""What libfaketime costs a local member that clock-skew runs start under it, on this machine.

For each environment (no preload; libfaketime as rsdrill starts members, its offset file read
at most once a second; the same re-reading the file on every read, `FAKETIME_NO_CACHE`), in a
fresh Python process: the cost of one wall-clock read (`time.time()`), and how long a
`pthread_cond_timedwait` of 5 ms on a condition variable on CLOCK_MONOTONIC really waits (the
wait Python's GIL hand-off and many servers' timers make; called through ctypes, so the preload's
own version of it answers). libfaketime 0.9.10 ends that wait at once when it leaves the
monotonic clock alone (`FAKETIME_DONT_FAKE_MONOTONIC`, which rsdrill sets) but keeps its
"monotonic fix" on (its default, the last row); rsdrill turns the fix off.

Usage: python bench/faketime_cost.py [--reads 200000] [--waits 50]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rsdrill.platforms.machine import faketime

CHILD = r"""
import ctypes, json, statistics, sys, time
reads, waits = int(sys.argv[1]), int(sys.argv[2])
started = time.perf_counter()
for _ in range(reads):
    time.time()
read_ns = (time.perf_counter() - started) / reads * 1e9

class Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]

libc = ctypes.CDLL(None)  # the process's own symbols: the preload's interpose libc's
attr = ctypes.create_string_buffer(64)
cond = ctypes.create_string_buffer(64)
mutex = ctypes.create_string_buffer(64)
libc.pthread_condattr_init(attr)
libc.pthread_condattr_setclock(attr, 1)  # CLOCK_MONOTONIC
libc.pthread_cond_init(cond, attr)
libc.pthread_mutex_init(mutex, None)
waited = []
for _ in range(waits):
    now = Timespec()
    libc.clock_gettime(1, ctypes.byref(now))
    nsec = now.tv_nsec + 5_000_000
    deadline = Timespec(now.tv_sec + nsec // 1_000_000_000, nsec % 1_000_000_000)
    begun = time.monotonic()
    libc.pthread_mutex_lock(mutex)
    libc.pthread_cond_timedwait(cond, mutex, ctypes.byref(deadline))
    libc.pthread_mutex_unlock(mutex)
    waited.append(time.monotonic() - begun)
print(json.dumps({"read_ns": read_ns, "wait_ms": statistics.median(waited) * 1000}))
"""


def measure(env: dict[str, str], reads: int, waits: int) -> dict[str, float]:
    done = subprocess.run([sys.executable, "-c", CHILD, str(reads), str(waits)], env=env,
                          capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
    result: dict[str, float] = json.loads(done.stdout)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reads", type=int, default=200_000)
    parser.add_argument("--waits", type=int, default=50)
    args = parser.parse_args()
    lib = faketime.library()
    if lib is None:
        sys.exit(f"libfaketime is not installed ({faketime.INSTALL_HINT})")
    with tempfile.TemporaryDirectory() as scratch:
        offset_file = Path(scratch) / "offset"
        faketime.set_offset(offset_file, 0.0)
        base = dict(os.environ)
        as_run = faketime.preload_env(offset_file, lib, base)
        no_cache = {k: v for k, v in as_run.items() if k != "FAKETIME_CACHE_DURATION"}
        envs = {
            "no preload": base,
            "libfaketime as rsdrill runs it (cache 1 s)": as_run,
            "libfaketime, FAKETIME_NO_CACHE=1": {**no_cache, "FAKETIME_NO_CACHE": "1"},
            "libfaketime with its monotonic fix (default)": {
                k: v for k, v in as_run.items() if k != "FAKETIME_FORCE_MONOTONIC_FIX"
            },
        }
        print(f"{lib}; {args.reads} reads, {args.waits} waits of 5 ms each")
        print(f"{'environment':<45} {'time.time()':>12} {'5 ms monotonic wait':>20}")
        for label, env in envs.items():
            got = measure(env, args.reads, args.waits)
            print(f"{label:<45} {got['read_ns']:>9.0f} ns {got['wait_ms']:>17.2f} ms")


if __name__ == "__main__":
    main()
