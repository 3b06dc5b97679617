"""The fault-injecting filesystem's own figures: its overhead with no fault set, and how well
its caps and added latency hold, for each layer side by side in one run: the compiled data
path (faultfs-rs), the same with passthrough for files opened while no rule is set, the same
with power-loss tracking (`tracked`: track_unsynced, as a run with power-loss faults mounts it)
and the Python layer (mfusepy), against the plain backing directory; beside them two peer FUSE
filesystems, without faults: libfuse's passthrough_hp (its C++ passthrough example, with
--nocache --nosplice: no attribute or entry caching, no writeback cache, no splice, as faultfs
serves) and LazyFS (Jepsen's power-loss filesystem: its own page cache, no eviction, flushed on
fsync), each mounted over the same backing directory. A figure whose operations failed shows
the error instead (LazyFS's O_DIRECT reads can fail with EINVAL).

A file on a faultfs mount (backing directory under /tmp) is hammered with 4 KiB operations by one
thread and by a few: writes at sequential and at random offsets (pwrite), reads (O_DIRECT pread at
random offsets on both sides: the compiled layer opens the backing file O_DIRECT too, the Python
layer drops O_DIRECT, so its figure is not like for like), buffered reads (pread: the plain
directory's come from the page cache, faultfs's opens have none), writes each followed by fsync
(of one file, by one thread and by several: the kernel's FUSE client holds a file's lock across
an fsync, so one file's fsyncs reach the daemon one at a time; then of a file per thread). Each
row says whether each layer meets issue 18's target for it (`TARGETS`); under the table, issue
35's ratios to the peers (`PEER_TARGETS`): the served compiled layer to passthrough_hp on every
row, the tracked layer to LazyFS on the write and write+fsync rows.
For the compiled layer, where a 4 KiB write's time goes: the client's mean time per write, the data
path's handler time and its pwrite's (the `profile` in `status`); the rest is the kernel's FUSE
round trip. Then one writer's 4 KiB writes with the writer and every daemon thread pinned, on the
same CPU and on different ones, beside two threads' wake round trip (a pipe each way): where waking
a thread on another CPU is dear (117 us on this VM, whose idle vCPUs halt at once, 10 us when they
poll 200 us first, 4 us on the same CPU), a one-writer row above measures which CPU the scheduler
puts the daemon's reader on, and this table the served path itself. First with no rule and on the
plain backing directory (overhead: ops/s through faultfs vs plain; also the emulator's own
workload: SQLite in WAL mode, synchronous=FULL, a commit every 50 inserts), then with write and
read IOPS caps at 100 and 500 (measured vs configured), a bandwidth cap (MiB/s with 128 KiB
writes), and added latency of 5 and 20 ms (median op time with the rule minus without). Targets:
caps within ±15 %, added latency within ±20 %. Caps and latency are measured on the compiled and
the Python layer (passthrough files opened before a rule bypass it by design:
docs/storage-faults.md).

Last, an rs3 sandbox with its members' data directories on each layer and peer vs a plain
directory: inserts/s with w:majority from a few client threads; the emulator's members, and real
mongod's when `mongod` is on PATH (faultfs and passthrough_hp are mounted over each data
directory, LazyFS over it from a directory beside it). A run with storage faults mounts without
passthrough (a file open in passthrough would escape the faults); passthru is for reference.

Usage: python bench/faultfs_io.py [--seconds 5] [--rounds 3] [--threads 4] [--port-base 21500]
       [--lazyfs PATH]
(each overhead figure is the median of `--rounds` turns of seconds/rounds, the layers and peers
taking turns: a figure taken once, a column after another, caught a disturbance of a few seconds
on one column alone)
(root; needs /dev/fuse and fusermount3; the compiled layer needs faultfs-rs built: pip install
-e ., or .ci/install-faultfs; passthrough_hp is taken from .cache/tools/bin or PATH, built by
.ci/install-passthrough-hp; LazyFS likewise, or --lazyfs PATH, built by .ci/install-lazyfs from a
clone of github.com/dsrhaslab/lazyfs, which no registry has. A peer not found is skipped, with a
line saying so.)
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import mmap
import os
import random
import shutil
import sqlite3
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

from pymongo import MongoClient, WriteConcern

from rsdrill.faultfs.control import request
from rsdrill.faultfs.mount import MOUNT_TIMEOUT_S, UNMOUNT_TIMEOUT_S, mount, unmount
from rsdrill.sandbox.cluster import EmulatorEngine, Engine, up
from rsdrill.sandbox.config import build_topology, member_dir
from rsdrill.sandbox.mongod import MongodEngine

BLOCK = 4096
MIB = 1024 * 1024
FILE_BYTES = 64 * MIB
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

    failures: list[OSError] = []

    def guarded(seed: int) -> None:
        # A failed operation is the caller's to report, rather than a traceback and a figure
        # from the other threads only.
        try:
            worker(seed)
        except OSError as error:
            with lock:
                failures.append(error)

    pool = [threading.Thread(target=guarded, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    if failures:
        raise failures[0]
    return durations


def _ops_per_s(place: Path, seconds: float, *, kind: str, threads: int, file_each: bool,
               pattern: str) -> float | str:  # fmt: skip
    """`_drive`'s operations per second on `place`'s file, or the name of the error an operation
    failed with (a peer may: LazyFS reads an O_DIRECT file into FUSE's buffer, EINVAL unless it
    is aligned)."""
    try:
        durations = _drive(place / "file", kind, seconds, threads, file_each=file_each,
                           pattern=pattern)  # fmt: skip
    except OSError as error:
        return errno.errorcode.get(error.errno or 0, str(error))
    return len(durations) / seconds


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
    ("tracked", {"layer": "compiled", "track_unsynced": True}),
)
RULED_LAYERS = ("python", "compiled")
# Issue 18's Done-when: ratios to the plain directory with no rule set.
TARGETS = {"write": 0.5, "fsync": 0.6, "read": 0.6, "sqlite": 0.6, "rs3": 0.8}
# Issue 35's Done-when, ratios of a faultfs column to a peer's: (faultfs column, peer column,
# target, the kinds of row it holds for; None: every row).
PEER_TARGETS: tuple[tuple[str, str, float, tuple[str, ...] | None], ...] = (
    ("compiled", "passthrough_hp", 0.9, None),
    ("tracked", "lazyfs", 1.0, ("write", "fsync")),
)
REPO = Path(__file__).resolve().parents[1]


class Column(NamedTuple):
    """A filesystem measured against the plain directory: `mount(backing, mount point, scratch
    directory)` holds it mounted for a with-block; `overlays`: it can be mounted over its backing
    directory itself (faultfs and passthrough_hp open it before mounting; LazyFS reaches it by
    path, which would lead back into its own mount)."""

    label: str
    mount: Callable[[Path, Path, Path], AbstractContextManager[None]]
    overlays: bool


@contextlib.contextmanager
def _faultfs(
    options: dict[str, object], backing: Path, point: Path, scratch: Path
) -> Iterator[None]:
    mount(backing, point, scratch, **options)  # type: ignore[arg-type]
    try:
        yield
    finally:
        unmount(point)


@contextlib.contextmanager
def _fuse_daemon(argv: list[str], point: Path, log: Path) -> Iterator[None]:
    """A peer's FUSE daemon (`argv`, in the foreground) serving `point` for the with-block."""
    with log.open("wb") as out:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                   stderr=subprocess.STDOUT)  # fmt: skip
    try:
        deadline = time.monotonic() + MOUNT_TIMEOUT_S
        while not os.path.ismount(point):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{argv[0]} did not mount {point} (exit status "
                                   f"{process.poll()}; see {log})")  # fmt: skip
            time.sleep(0.02)
        yield
    finally:
        # Lazily when busy (the daemon is then killed if it outlives the wait). The exit status
        # is not checked: LazyFS aborts (134) once unmounted, and the figures are taken by then.
        for lazy in ([], ["-z"]):
            unmounted = subprocess.run(["fusermount3", "-u", *lazy, str(point)],
                                       capture_output=True, check=False)  # fmt: skip
            if unmounted.returncode == 0:
                break
        try:
            process.wait(UNMOUNT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _passthrough_hp(
    binary: Path, backing: Path, point: Path, scratch: Path
) -> AbstractContextManager[None]:
    scratch.mkdir(parents=True, exist_ok=True)
    argv = [str(binary), "--nocache", "--nosplice", "--foreground", str(backing), str(point)]
    return _fuse_daemon(argv, point, scratch / "passthrough_hp.log")


def _lazyfs(
    binary: Path, cache_mib: int, backing: Path, point: Path, scratch: Path
) -> AbstractContextManager[None]:
    """LazyFS over `backing` with a page cache of `cache_mib` and no eviction: nothing reaches
    the backing file before an fsync, so a power loss can drop all unsynced data (what the
    tracked faultfs layer offers too, by undoing it)."""
    scratch.mkdir(parents=True, exist_ok=True)
    config = scratch / "lazyfs.toml"
    config.write_text(
        f'[faults]\nfifo_path="{scratch / "lazyfs.fifo"}"\n'
        f"[cache]\napply_eviction=false\n"
        f'[cache.simple]\ncustom_size="{cache_mib}mb"\nblocks_per_page=1\n'
        f'[filesystem]\nlog_all_operations=false\nlogfile=""\n'
    )
    # Absolute paths throughout; it ignores arguments past the tenth.
    argv = [str(binary), str(point), "--config-path", str(config), "-o", "modules=subdir",
            "-o", f"subdir={backing}", "-f"]  # fmt: skip
    return _fuse_daemon(argv, point, scratch / "lazyfs.log")


def _peer(name: str, build: str) -> Path | None:
    """A peer's binary from .cache/tools/bin, else PATH; None, said, when neither has it."""
    pinned = REPO / ".cache/tools/bin" / name
    found = str(pinned) if os.access(pinned, os.X_OK) else shutil.which(name)
    if found is None:
        print(f"{name}: not in .cache/tools/bin nor on PATH, column skipped (build it: {build})")
    return None if found is None else Path(found)


def _columns(lazyfs: Path | None, threads: int) -> list[Column]:
    """The faultfs layers, then each peer found; a line for each peer skipped."""
    columns = [Column(label, partial(_faultfs, options), True) for label, options in LAYERS]
    binary = _peer("passthrough_hp", ".ci/install-passthrough-hp")
    if binary is not None:
        columns.append(Column("passthrough_hp", partial(_passthrough_hp, binary), True))
    lazyfs = lazyfs or _peer("lazyfs", ".ci/install-lazyfs SOURCE, SOURCE a clone of "
                             "github.com/dsrhaslab/lazyfs")  # fmt: skip
    if lazyfs is not None:
        # Room for every bench file written through in full, and SQLite's database and WAL
        # (LazyFS allocates it all at start, for each mount).
        cache_mib = (threads + 1) * FILE_BYTES // MIB + 512
        columns.append(Column("lazyfs", partial(_lazyfs, lazyfs.resolve(), cache_mib), False))
    return columns


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
    parser.add_argument("--rounds", type=int, default=3,
                        help="turns each overhead figure is the median of")  # fmt: skip
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--port-base", type=int, default=21500, help="the rs3 sandbox's ports")
    parser.add_argument(
        "--lazyfs",
        type=Path,
        metavar="PATH",
        help="a LazyFS binary (default: .cache/tools/bin's, PATH's)",
    )
    args = parser.parse_args()
    if args.lazyfs is not None and not os.access(args.lazyfs, os.X_OK):
        parser.error(f"--lazyfs {args.lazyfs}: not an executable file")
    seconds, threads = args.seconds, args.threads
    print(f"faultfs I/O benchmark: {threads} threads, {seconds:g} s per figure, 4 KiB ops")
    columns = _columns(args.lazyfs, threads)
    with tempfile.TemporaryDirectory(prefix="faultfs-bench-") as tmp:
        backing = Path(tmp) / "backing"
        backing.mkdir()
        for name in ["file"] + [f"file-{i}" for i in range(args.threads)]:
            with (backing / name).open("wb") as out:
                out.truncate(FILE_BYTES)
        points: dict[str, Path] = {}
        with contextlib.ExitStack() as mounted:
            for column in columns:
                point = Path(tmp) / f"mnt-{column.label}"
                point.mkdir()
                mounted.enter_context(
                    column.mount(backing, point, Path(tmp) / f"state-{column.label}")
                )
                points[column.label] = point
            run(backing, points, seconds, threads, args.rounds)
        _rs3(Path(tmp), columns, args.port_base, seconds, threads)


def _rs3_inserts_per_s(directory: Path, column: Column | None, engine: Engine, port_base: int,
                       seconds: float, threads: int) -> float:  # fmt: skip
    """Inserts/s (w:majority) into an rs3 of `engine` whose members' data is on `column`'s
    filesystem (None: a plain directory)."""
    spec = build_topology("rs3", port_base=port_base)
    with contextlib.ExitStack() as mounted:

        def mount_members() -> None:
            assert column is not None
            for member in spec.members:
                scratch = member_dir(directory, member)
                data = scratch / "data"
                backing = data if column.overlays else scratch / "backing"
                for path in (data, backing):
                    path.mkdir(parents=True, exist_ok=True)
                mounted.enter_context(column.mount(backing, data, scratch))

        sandbox = up(directory, spec, engine, mount_members if column else None)
        try:
            return _inserts_per_s(sandbox.uri, seconds, threads)
        finally:
            sandbox.down()


def _inserts_per_s(uri: str, seconds: float, threads: int) -> float:
    """Inserts/s (w:majority) from `threads` clients for `seconds`."""
    count = 0
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def client_loop() -> None:
        nonlocal count
        with MongoClient[dict[str, Any]](uri) as client:
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


def _rs3(tmp: Path, columns: list[Column], port_base: int, seconds: float, threads: int) -> None:
    """The rs3 figures: the emulator's, and real mongod's when it is on PATH."""
    engines: list[tuple[str, Engine]] = [("emulator", EmulatorEngine())]
    if (mongod := shutil.which("mongod")) is not None:
        engines.append(("mongod", MongodEngine(mongod)))
    print(
        f"\nrs3, members' data on each layer and peer: inserts/s (w:majority, {threads} clients; "
        f"target {TARGETS['rs3']:g}; passthru for reference: a run with storage faults does not "
        "use it)"
    )
    for name, engine in engines:
        base = _rs3_inserts_per_s(tmp / f"rs3-{name}-plain", None, engine, port_base, seconds,
                                  threads)  # fmt: skip
        line = f"  {name:<9} plain {base:.0f}"
        for column in columns:
            fused = _rs3_inserts_per_s(tmp / f"rs3-{name}-{column.label}", column, engine,
                                       port_base, seconds, threads)  # fmt: skip
            line += (f"; {column.label} {fused:.0f} "
                     f"({fused / base:.2f}{_mark(fused / base, 'rs3')})")  # fmt: skip
        print(line)


def _mark(ratio: float, target: str | None) -> str:
    """A ratio's verdict against the Done-when target of its row: ' ok', ' MISS' or ''."""
    return _at_least(ratio, None if target is None else TARGETS[target])


def _at_least(ratio: float, target: float | None) -> str:
    """' ok' when `ratio` reaches `target`, ' MISS' when not, '' without a target."""
    if target is None:
        return ""
    return " ok" if ratio >= target else " MISS"


def _width(label: str) -> int:
    """A column's width: 11, or more for a longer label (passthrough_hp)."""
    return max(11, len(label) + 1)


def _row(name: str, plain: float, figures: dict[str, float | str], target: str | None) -> str:
    cells = ""
    for label, figure in figures.items():
        if isinstance(figure, str):  # the error an operation failed with
            cells += f"{figure:>{_width(label)}}{'-':>6}{'':<5}"
        else:
            ratio = figure / plain
            cells += f"{figure:>{_width(label)}.0f}{ratio:>6.2f}{_mark(ratio, target):<5}"
    return f"  {name:<26}{plain:>10.0f}{cells}"


def _peer_ratios(rows: list[tuple[str, str, dict[str, float | str]]]) -> None:
    """Issue 35's ratios of faultfs columns to the peers measured, a line per row of the
    overhead table (name, kind, figures)."""
    pairs = [pair for pair in PEER_TARGETS if pair[1] in rows[0][2]]
    if not pairs:
        return
    print("\nto the peers (issue 35; ratio of ops/s; ok / MISS against the target):")
    for ours, peer, target, kinds in pairs:
        rows_meant = "every row" if kinds is None else f"rows of kind {', '.join(kinds)}"
        print(f"  {ours} / {peer}: target {target:g} on {rows_meant}")
    labels = [f"{ours}/{peer}" for ours, peer, _, _ in pairs]
    print(f"  {'operation':<26}" + "".join(f"{label:>{len(label) + 2}}{'':<5}" for label in labels))
    for name, kind, figures in rows:
        cells = ""
        for label, (ours, peer, target, kinds) in zip(labels, pairs, strict=True):
            width = len(label) + 2
            mine, theirs = figures[ours], figures[peer]
            if isinstance(mine, str) or isinstance(theirs, str):
                cells += f"{'-':>{width}}{'':<5}"
                continue
            meant = target if kinds is None or kind in kinds else None
            cells += f"{mine / theirs:>{width}.2f}{_at_least(mine / theirs, meant):<5}"
        print(f"  {name:<26}{cells}")


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


def _wake_round_trip_us(cpus: tuple[int, int], count: int = 20_000) -> float:
    """Mean time for one thread to wake another on `cpus[1]` through a pipe and be woken back."""
    there, back = os.pipe(), os.pipe()

    def echo() -> None:
        os.sched_setaffinity(0, {cpus[1]})
        for _ in range(count):
            os.read(there[0], 1)
            os.write(back[1], b"x")

    mask = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpus[0]})
    peer = threading.Thread(target=echo)
    peer.start()
    started = time.perf_counter()
    for _ in range(count):
        os.write(there[1], b"x")
        os.read(back[0], 1)
    elapsed = time.perf_counter() - started
    peer.join()
    os.sched_setaffinity(0, mask)
    for fd in (*there, *back):
        os.close(fd)
    return elapsed / count * 1e6


def _pin_daemons(point: Path, cpus: set[int]) -> None:
    """Every thread of the processes serving `point` (their command line names it) on `cpus`."""
    mine = str(os.getpid())
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if pid == mine or os.fsencode(point) not in argv:
                continue
            for task in os.listdir(f"/proc/{pid}/task"):
                os.sched_setaffinity(int(task), cpus)
        except (FileNotFoundError, ProcessLookupError):  # it ended meanwhile
            continue


HALT_POLL = Path("/sys/module/haltpoll/parameters/guest_halt_poll_ns")


def _halt_poll() -> str:
    """How long an idle vCPU polls before it halts (the haltpoll cpuidle driver of a VM guest),
    which decides what waking a thread on an idle CPU costs; '' where there is no such driver."""
    try:
        return f"; an idle vCPU polls {int(HALT_POLL.read_text()) / 1000:g} us before it halts"
    except (OSError, ValueError):
        return ""


def _placement(points: dict[str, Path], seconds: float) -> None:
    """One writer's 4 KiB sequential writes, writer on the first CPU and each daemon pinned to
    it or to another: the served path without the scheduler's placement in the figure."""
    mask = os.sched_getaffinity(0)
    first, *others = sorted(mask)
    if not others:
        print("\none writer by CPU placement: skipped (one CPU)")
        return
    labels = [label for label in ("compiled", "passthrough_hp") if label in points]
    print(f"\none writer's 4 KiB sequential writes by CPU placement (ops/s; the writer on CPU "
          f"{first}; two threads' wake round trip: same CPU "
          f"{_wake_round_trip_us((first, first)):.1f} us, another CPU "
          f"{_wake_round_trip_us((first, others[0])):.1f} us{_halt_poll()})")  # fmt: skip
    print(f"  {'daemon':<22}" + "".join(f"{label:>{_width(label)}}" for label in labels)
          + ("   compiled/passthrough_hp" if len(labels) == 2 else ""))  # fmt: skip
    for name, cpu in (("on the writer's CPU", first), ("on another CPU", others[0])):
        figures: dict[str, float] = {}
        os.sched_setaffinity(0, {first})  # the writer thread inherits it
        try:
            for label in labels:
                _pin_daemons(points[label], {cpu})
                figures[label] = len(_drive(points[label] / "file", "write", seconds, 1,
                                            pattern="sequential")) / seconds  # fmt: skip
                _pin_daemons(points[label], mask)
        finally:
            os.sched_setaffinity(0, mask)
        ratio = (f"{figures['compiled'] / figures['passthrough_hp']:>26.2f}"
                 if len(labels) == 2 else "")  # fmt: skip
        print(f"  {name:<22}" + "".join(f"{figures[label]:>{_width(label)}.0f}"
                                        for label in labels) + ratio)  # fmt: skip


def _median(figures: list[float | str]) -> float | str:
    """The median of a figure's turns; the error where a turn failed."""
    errors = [figure for figure in figures if isinstance(figure, str)]
    return errors[0] if errors else statistics.median(f for f in figures if not isinstance(f, str))


def run(backing: Path, points: dict[str, Path], seconds: float, threads: int, rounds: int) -> None:
    turn = seconds / rounds
    print("\noverhead with no rule set (ops/s; ratio to plain; ok / MISS against the target;"
          f" each the median of {rounds} turns of {turn:g} s, the columns in turn)")  # fmt: skip
    print(f"  {'operation':<26}{'plain':>10}" + "".join(f"{label:>{_width(label)}}{'ratio':>6}"
                                                     f"{'':<5}" for label in points))  # fmt: skip
    # A row's figure at a place (the plain directory or a mount point) in so many seconds.
    measures: list[tuple[str, str, str | None, Callable[[Path, float], float | str]]] = [
        (name, kind, target,
         partial(_ops_per_s, kind=kind, threads=n, file_each=file_each, pattern=pattern))
        for name, kind, pattern, n, file_each, target in _overhead_rows(threads)
    ]  # fmt: skip
    measures.append(("sqlite", "sqlite", "sqlite", _sqlite_inserts_per_s))
    rows: list[tuple[str, str, dict[str, float | str]]] = []
    for name, kind, target, measure in measures:
        # Turns, so that a minute of a slower disk or a busy host falls on every column alike.
        bases: list[float | str] = []
        turns: dict[str, list[float | str]] = {label: [] for label in points}
        for _ in range(rounds):
            bases.append(measure(backing, turn))
            for label, point in points.items():
                turns[label].append(measure(point, turn))
        base = _median(bases)
        if isinstance(base, str):
            raise RuntimeError(f"{name} failed on the plain directory: {base}")
        fused = {label: _median(figures) for label, figures in turns.items()}
        print(_row(name, base, fused, target))
        rows.append((name, kind, fused))
    print("  (sqlite: WAL inserts/s, a commit every 50; an emulator member makes 10 commits/s)")
    _peer_ratios(rows)
    _write_profile(backing, points["compiled"], seconds, threads)
    _placement(points, seconds)

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
            ops = len(_drive(points[label] / "file", kind, seconds, threads, block))
            measured = ops * unit / seconds
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
