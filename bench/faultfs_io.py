"""The fault-injecting filesystem's own figures: its overhead with no fault set, and how well
its caps and added latency hold.

A file on a faultfs mount (backing directory under /tmp) is hammered by a few threads with 4 KiB
operations: writes (pwrite), reads (O_DIRECT pread, so that every read reaches the filesystem
rather than the kernel's page cache), writes each followed by fsync. First with no rule and on
the plain backing directory (overhead: ops/s through faultfs vs plain; also the emulator's own
workload: SQLite in WAL mode, synchronous=FULL, a commit every 50 inserts), then with write and read
IOPS caps at 100 and 500 (measured vs configured), a bandwidth cap (MiB/s with 128 KiB writes),
and added latency of 5 and 20 ms (median op time with the rule minus without). Targets: caps
within ±15 %, added latency within ±20 %.

Usage: python bench/faultfs_io.py [--seconds 5] [--threads 4] (root; needs /dev/fuse)
"""

from __future__ import annotations

import argparse
import mmap
import os
import sqlite3
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from rsdrill.faultfs.control import request
from rsdrill.faultfs.mount import mount, unmount

BLOCK = 4096
FILE_BYTES = 64 * 1024 * 1024
CAP_TOLERANCE = 0.15
LATENCY_TOLERANCE = 0.20


def _drive(path: Path, kind: str, seconds: float, threads: int, block: int = BLOCK) -> list[float]:
    """Durations of every operation `threads` threads complete within `seconds`."""
    durations: list[float] = []
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def worker(seed: int) -> None:
        direct = os.O_DIRECT if kind == "read" else 0
        fd = os.open(path, os.O_RDWR | direct)
        buf = mmap.mmap(-1, block)
        buf.write(b"w" * block)
        offset = (seed * 7919 * block) % (FILE_BYTES - block)
        mine = []
        try:
            while time.monotonic() < deadline:
                started = time.monotonic()
                if kind == "read":
                    os.preadv(fd, [buf], offset)
                else:
                    os.pwrite(fd, buf, offset)
                    if kind == "fsync":
                        os.fsync(fd)
                mine.append(time.monotonic() - started)
                offset = (offset + 17 * block) % (FILE_BYTES - block)
        finally:
            os.close(fd)
        with lock:
            durations.extend(mine)

    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return durations


def _sqlite_inserts_per_s(directory: Path, seconds: float) -> float:
    """The emulator's storage pattern: WAL, synchronous=FULL, 16 KiB pages, group commits."""
    path = directory / "bench.sqlite"
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("PRAGMA page_size=16384")
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB)")
        count, deadline = 0, time.monotonic() + seconds
        db.execute("BEGIN")
        while time.monotonic() < deadline:
            db.execute("INSERT INTO t (v) VALUES (?)", (os.urandom(200),))
            count += 1
            if count % 50 == 0:
                db.execute("COMMIT")
                db.execute("BEGIN")
        db.execute("COMMIT")
    finally:
        db.close()
    for leftover in directory.glob("bench.sqlite*"):
        leftover.unlink()
    return count / seconds


def _rule(point: Path, **rule: object) -> None:
    request(point, {"op": "clear"})
    if rule:
        request(point, {"op": "set", "name": "bench", "rule": rule})


def _verdict(ratio: float, tolerance: float) -> str:
    return "PASS" if abs(ratio - 1) <= tolerance else "MISS"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--threads", type=int, default=4)
    args = parser.parse_args()
    seconds, threads = args.seconds, args.threads
    with tempfile.TemporaryDirectory(prefix="faultfs-bench-") as tmp:
        backing, point = Path(tmp) / "backing", Path(tmp) / "mnt"
        backing.mkdir()
        point.mkdir()
        with (backing / "file").open("wb") as out:
            out.truncate(FILE_BYTES)
        mount(backing, point, Path(tmp) / "state")
        try:
            run(backing / "file", point / "file", point, seconds, threads)
            base = _sqlite_inserts_per_s(backing, seconds)
            fused = _sqlite_inserts_per_s(point, seconds)
            print(f"\nSQLite WAL inserts/s (a commit every 50): plain {base:.0f}, faultfs "
                  f"{fused:.0f} ({fused / 50:.0f} commits/s; an emulator member makes 10), "
                  f"ratio {fused / base:.2f}")  # fmt: skip
        finally:
            unmount(point)


def run(plain: Path, mounted: Path, point: Path, seconds: float, threads: int) -> None:
    rate: Callable[[list[float]], float] = lambda ds: len(ds) / seconds  # noqa: E731
    print(f"faultfs I/O benchmark: {threads} threads, {seconds:g} s per figure, 4 KiB ops")
    print("\noverhead with no rule set (ops/s)")
    print(f"  {'operation':<14}{'plain':>10}{'faultfs':>10}{'ratio':>8}")
    for kind in ("write", "read", "fsync"):
        base, fused = rate(_drive(plain, kind, seconds, threads)), 0.0
        fused = rate(_drive(mounted, kind, seconds, threads))
        print(f"  {kind:<14}{base:>10.0f}{fused:>10.0f}{fused / base:>8.2f}")

    print(f"\nIOPS caps (target ±{CAP_TOLERANCE:.0%})")
    print(f"  {'cap':<22}{'configured':>11}{'measured':>10}{'ratio':>8}")
    for direction in ("write", "read"):
        for iops in (100, 500):
            _rule(point, **{f"{direction}_iops": iops})
            measured = rate(_drive(mounted, direction, seconds, threads))
            ratio = measured / iops
            print(f"  {direction + '_iops':<22}{iops:>11}{measured:>10.1f}{ratio:>8.3f}  "
                  f"{_verdict(ratio, CAP_TOLERANCE)}")  # fmt: skip
    mib = 1024 * 1024
    for mb_s in (4, 16):
        _rule(point, write_bytes_per_s=mb_s * mib)
        durations = _drive(mounted, "write", seconds, threads, block=128 * 1024)
        measured = len(durations) * 128 * 1024 / seconds / mib
        ratio = measured / mb_s
        print(f"  {'write MiB/s (128 KiB)':<22}{mb_s:>11}{measured:>10.2f}{ratio:>8.3f}  "
              f"{_verdict(ratio, CAP_TOLERANCE)}")  # fmt: skip

    print(f"\nadded latency per write (target ±{LATENCY_TOLERANCE:.0%}), one thread")
    _rule(point)
    base = statistics.median(_drive(mounted, "write", seconds, 1))
    print(f"  no rule: median {base * 1000:.3f} ms")
    for latency_ms in (5, 20):
        _rule(point, latency_s=latency_ms / 1000, operations=["write"])
        median = statistics.median(_drive(mounted, "write", seconds, 1))
        added = (median - base) * 1000
        ratio = added / latency_ms
        print(f"  latency {latency_ms:>3} ms: median {median * 1000:.3f} ms, added {added:.3f} ms,"
              f" ratio {ratio:.3f}  {_verdict(ratio, LATENCY_TOLERANCE)}")  # fmt: skip
    _rule(point)


if __name__ == "__main__":
    main()
