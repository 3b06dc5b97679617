"""The fault-injecting filesystem's own figures: its overhead with no fault set, and how well
its caps and added latency hold, for each layer side by side in one run: the compiled data
path (faultfs-rs), the same with passthrough for files opened while no rule is set, and the
Python layer (mfusepy), against the plain backing directory.

A file on a faultfs mount (backing directory under /tmp) is hammered with 4 KiB operations by one
thread and by a few: writes at sequential and at random offsets (pwrite), reads (O_DIRECT pread at
random offsets on both sides: the compiled layer opens the backing file O_DIRECT too, the Python
layer drops O_DIRECT, so its figure is not like for like), buffered reads (pread: the plain
directory's come from the page cache, faultfs's opens have none), writes each followed by fsync
(of one file, by one thread and by several: the kernel's FUSE client holds a file's lock across
an fsync, so one file's fsyncs reach the daemon one at a time; then of a file per thread). Each
row says whether each layer meets issue 18's target for it (`TARGETS`).
For the compiled layer, where a 4 KiB write's time goes: the client's mean time per write, the
data path's handler time and its pwrite's (the `profile` in `status`); the rest is the kernel's
FUSE round trip. First with no rule and on
the plain backing directory (overhead: ops/s through faultfs vs plain; also the emulator's own
workload: SQLite in WAL mode, synchronous=FULL, a commit every 50 inserts), then with write and read
IOPS caps at 100 and 500 (measured vs configured), a bandwidth cap (MiB/s with 128 KiB writes),
and added latency of 5 and 20 ms (median op time with the rule minus without). Targets: caps
within ±15 %, added latency within ±20 %. Caps and latency are measured on the compiled and the
Python layer (passthrough files opened before a rule bypass it by design: docs/storage-faults.md).

Last, an rs3 sandbox with its members' data directories on each layer vs a plain directory:
inserts/s with w:majority from a few client threads; the emulator's members, and real mongod's
when `mongod` is on PATH. A run with storage faults mounts without passthrough (a file open in
passthrough would escape the faults); the passthrough figure is there for reference.

Usage: python bench/faultfs_io.py [--seconds 5] [--threads 4] [--port-base 21500] (root; needs
/dev/fuse; the compiled layer needs faultfs-rs built: pip install -e ., or .ci/install-faultfs)
"""

from __future__ import annotations

import argparse
import mmap
import os
import random
import shutil
import sqlite3
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from pymongo import MongoClient, WriteConcern

from rsdrill.faultfs.control import request
from rsdrill.faultfs.mount import mount, unmount, unmount_all
from rsdrill.sandbox.cluster import EmulatorEngine, Engine, up
from rsdrill.sandbox.config import build_topology, member_dir
from rsdrill.sandbox.mongod import MongodEngine

BLOCK = 4096
FILE_BYTES = 64 * 1024 * 1024
CAP_TOLERANCE = 0.15
LATENCY_TOLERANCE = 0.20


def _drive(path: Path, kind: str, seconds: float, threads: int, block: int = BLOCK,
           file_each: bool = False, pattern: str = "random") -> list[float]:  # fmt: skip
    """Durations of every operation `threads` threads complete within `seconds` (kind: write,
    read (O_DIRECT), cached read, fsync (a write, then fsync)) at `pattern` offsets (random:
    block-aligned, each thread its own seeded sequence; sequential: each thread from its own
    part of the file onwards); `file_each`: thread i uses `path`-i."""
    durations: list[float] = []
    lock = threading.Lock()
    deadline = time.monotonic() + seconds
    blocks = (FILE_BYTES - block) // block

    def worker(seed: int) -> None:
        direct = os.O_DIRECT if kind == "read" else 0
        mine_path = path.with_name(f"{path.name}-{seed}") if file_each else path
        fd = os.open(mine_path, os.O_RDWR | direct)
        buf = mmap.mmap(-1, block)
        buf.write(b"w" * block)
        chooser = random.Random(seed)
        index = seed * blocks // max(threads, 1)
        mine = []
        try:
            while time.monotonic() < deadline:
                index = chooser.randrange(blocks) if pattern == "random" else (index + 1) % blocks
                started = time.monotonic()
                if kind in ("read", "cached read"):
                    os.preadv(fd, [buf], index * block)
                else:
                    os.pwrite(fd, buf, index * block)
                    if kind == "fsync":
                        os.fsync(fd)
                mine.append(time.monotonic() - started)
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


# (label, mount options): every layer is mounted over the same backing directory.
LAYERS: tuple[tuple[str, dict[str, object]], ...] = (
    ("python", {"layer": "python"}),
    ("compiled", {"layer": "compiled"}),
    ("passthru", {"layer": "compiled", "passthrough": True}),
)
RULED_LAYERS = ("python", "compiled")
# Issue 18's Done-when: ratios to the plain directory with no rule set.
TARGETS = {"write": 0.5, "fsync": 0.6, "read": 0.6, "sqlite": 0.6, "rs3": 0.8}


def _overhead_rows(threads: int) -> list[tuple[str, str, str, int, bool, str | None]]:
    """(row name, kind, pattern, threads, a file per thread, target) of the overhead table."""
    counts = sorted({1, threads})
    rows: list[tuple[str, str, str, int, bool, str | None]] = [
        (f"write {pattern} x{n}", "write", pattern, n, False, "write")
        for pattern in ("sequential", "random")
        for n in counts
    ]
    rows += [(f"O_DIRECT read random x{n}", "read", "random", n, False, "read") for n in counts]
    rows.append((f"buffered read random x{threads}", "cached read", "random", threads, False,
                 None))  # fmt: skip
    rows += [(f"write+fsync one file x{n}", "fsync", "sequential", n, False, "fsync")
             for n in counts]  # fmt: skip
    rows.append((f"write+fsync file each x{threads}", "fsync", "sequential", threads, True,
                 "fsync"))  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--port-base", type=int, default=21500, help="the rs3 sandbox's ports")
    args = parser.parse_args()
    seconds, threads = args.seconds, args.threads
    with tempfile.TemporaryDirectory(prefix="faultfs-bench-") as tmp:
        backing = Path(tmp) / "backing"
        backing.mkdir()
        for name in ["file"] + [f"file-{i}" for i in range(args.threads)]:
            with (backing / name).open("wb") as out:
                out.truncate(FILE_BYTES)
        points: dict[str, Path] = {}
        try:
            for label, options in LAYERS:
                point = Path(tmp) / f"mnt-{label}"
                point.mkdir()
                mount(backing, point, Path(tmp) / f"state-{label}", **options)  # type: ignore[arg-type]
                points[label] = point
            run(backing, points, seconds, threads)
        finally:
            for point in points.values():
                unmount(point)
        _rs3(Path(tmp), args.port_base, seconds, threads)


def _rs3_inserts_per_s(directory: Path, layer: dict[str, object] | None, engine: Engine,
                       port_base: int, seconds: float, threads: int) -> float:  # fmt: skip
    """Inserts/s (w:majority) into an rs3 of `engine` whose members' data is on a mount with
    `layer`'s options (None: a plain directory)."""
    spec = build_topology("rs3", port_base=port_base)

    def mount_members() -> None:
        for member in spec.members:
            data = member_dir(directory, member) / "data"
            data.mkdir(parents=True, exist_ok=True)
            mount(data, data, member_dir(directory, member), **layer)  # type: ignore[arg-type]

    sandbox = up(directory, spec, engine, mount_members if layer else None)
    try:
        count = 0
        lock = threading.Lock()
        deadline = time.monotonic() + seconds

        def client_loop() -> None:
            nonlocal count
            with MongoClient(sandbox.uri) as client:
                coll = client.bench.get_collection("c", write_concern=WriteConcern(w="majority"))
                mine = 0
                while time.monotonic() < deadline:
                    coll.insert_one({"v": "x" * 200})
                    mine += 1
            with lock:
                count += mine

        pool = [threading.Thread(target=client_loop) for _ in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        return count / seconds
    finally:
        sandbox.down()
        unmount_all(directory)


def _rs3(tmp: Path, port_base: int, seconds: float, threads: int) -> None:
    """The rs3 figures: the emulator's, and real mongod's when it is on PATH."""
    engines: list[tuple[str, Engine]] = [("emulator", EmulatorEngine())]
    if (mongod := shutil.which("mongod")) is not None:
        engines.append(("mongod", MongodEngine(mongod)))
    print(
        f"\nrs3, members' data on each layer: inserts/s (w:majority, {threads} clients; target "
        f"{TARGETS['rs3']:g}; passthru for reference: a run with storage faults does not use it)"
    )
    for name, engine in engines:
        base = _rs3_inserts_per_s(tmp / f"rs3-{name}-plain", None, engine, port_base, seconds,
                                  threads)  # fmt: skip
        line = f"  {name:<9} plain {base:.0f}"
        for label, options in LAYERS:
            fused = _rs3_inserts_per_s(tmp / f"rs3-{name}-{label}", options, engine, port_base,
                                       seconds, threads)  # fmt: skip
            line += f"; {label} {fused:.0f} ({fused / base:.2f}{_mark(fused / base, 'rs3')})"
        print(line)


def _mark(ratio: float, target: str | None) -> str:
    """A ratio's verdict against the Done-when target of its row: ' ok', ' MISS' or ''."""
    if target is None:
        return ""
    return " ok" if ratio >= TARGETS[target] else " MISS"


def _row(name: str, plain: float, figures: dict[str, float], target: str | None) -> str:
    cells = "".join(
        f"{figures[label]:>11.0f}{figures[label] / plain:>6.2f}"
        f"{_mark(figures[label] / plain, target):<5}"
        for label, _ in LAYERS
    )
    return f"  {name:<26}{plain:>10.0f}{cells}"


def _write_profile(backing: Path, point: Path, seconds: float, threads: int) -> None:
    """Where a 4 KiB write's time goes on the compiled layer, with 1 and `threads` writers."""
    print("\ncompiled layer, a 4 KiB write's time (us per write: client, data path's handler,")
    print("its pwrite; the rest is the kernel's FUSE round trip and waiting for the file's lock)")
    for n in sorted({1, threads}):
        plain = _drive(backing / "file", "write", seconds, n)
        before = request(point, {"op": "status"})["profile"]["write"]
        durations = _drive(point / "file", "write", seconds, n)
        after = request(point, {"op": "status"})["profile"]["write"]
        served = after["served"] - before["served"]
        handler, pwrite = (1e6 * (after[k] - before[k]) / served
                           for k in ("handler_s", "syscall_s"))  # fmt: skip
        client = 1e6 * statistics.fmean(durations)
        print(
            f"  {n} thread(s): plain {1e6 * statistics.fmean(plain):.1f}; faultfs client "
            f"{client:.1f}, handler {handler:.1f} (pwrite {pwrite:.1f}), "
            f"round trip {client - handler:.1f}"
        )


def run(backing: Path, points: dict[str, Path], seconds: float, threads: int) -> None:
    rate: Callable[[list[float]], float] = lambda ds: len(ds) / seconds  # noqa: E731
    print(f"faultfs I/O benchmark: {threads} threads, {seconds:g} s per figure, 4 KiB ops")
    print("\noverhead with no rule set (ops/s; ratio to plain; ok / MISS against the target)")
    print(f"  {'operation':<26}{'plain':>10}" + "".join(f"{label:>11}{'ratio':>6}{'':<5}"
                                                     for label, _ in LAYERS))  # fmt: skip
    for name, kind, pattern, n, file_each, target in _overhead_rows(threads):
        base = rate(_drive(backing / "file", kind, seconds, n, file_each=file_each,
                           pattern=pattern))  # fmt: skip
        fused = {label: rate(_drive(points[label] / "file", kind, seconds, n,
                                    file_each=file_each, pattern=pattern))
                 for label, _ in LAYERS}  # fmt: skip
        print(_row(name, base, fused, target))
    base = _sqlite_inserts_per_s(backing, seconds)
    fused = {label: _sqlite_inserts_per_s(points[label], seconds) for label, _ in LAYERS}
    print(_row("sqlite", base, fused, "sqlite"))
    print("  (sqlite: WAL inserts/s, a commit every 50; an emulator member makes 10 commits/s)")
    _write_profile(backing, points["compiled"], seconds, threads)

    print(f"\nIOPS caps (target ±{CAP_TOLERANCE:.0%}; measured ops/s, ratio to configured)")
    print(f"  {'cap':<22}{'configured':>11}" + "".join(f"{label:>11}{'ratio':>7}{'':>6}"
                                                     for label in RULED_LAYERS))  # fmt: skip
    mib = 1024 * 1024
    caps: list[tuple[str, float, dict[str, object], str, int, float]] = [
        (f"{d}_iops", iops, {f"{d}_iops": iops}, d, BLOCK, 1.0)
        for d in ("write", "read")
        for iops in (100, 500)
    ]
    caps += [("write MiB/s (128 KiB)", mb_s, {"write_bytes_per_s": mb_s * mib}, "write",
              128 * 1024, 128 * 1024 / mib) for mb_s in (4, 16)]  # fmt: skip
    for name, configured, rule, kind, block, unit in caps:
        cells = ""
        for label in RULED_LAYERS:
            _rule(points[label], **rule)
            measured = len(_drive(points[label] / "file", kind, seconds, threads, block))
            measured *= unit / seconds
            ratio = measured / configured
            cells += f"{measured:>11.1f}{ratio:>7.3f}  {_verdict(ratio, CAP_TOLERANCE)}"
            _rule(points[label])
        print(f"  {name:<22}{configured:>11g}{cells}")

    print(f"\nadded latency per write (target ±{LATENCY_TOLERANCE:.0%}), one thread")
    for label in RULED_LAYERS:
        point = points[label]
        _rule(point)
        base = statistics.median(_drive(point / "file", "write", seconds, 1))
        line = f"  {label:<9} no rule: median {base * 1000:.3f} ms"
        for latency_ms in (5, 20):
            _rule(point, latency_s=latency_ms / 1000, operations=["write"])
            median = statistics.median(_drive(point / "file", "write", seconds, 1))
            ratio = (median - base) * 1000 / latency_ms
            line += f"; +{latency_ms} ms: added {(median - base) * 1000:.3f} ms, ratio {ratio:.3f}"
            line += f" {_verdict(ratio, LATENCY_TOLERANCE)}"
        _rule(point)
        print(line)


if __name__ == "__main__":
    main()
