"""The sandbox emulator's write and read path against FerretDB's, side by side in one run.

Each server is one standalone on loopback, fresh, driven by the same pymongo workload from
client threads of this process (1 and 8): journaled inserts (`j: true`: the emulator commits and
fsyncs its SQLite file before answering; FerretDB's SQLite runs in WAL mode with its default
synchronous=FULL, so every commit is fsynced: it has no other journal), then YCSB-like core
workloads over `--records` preloaded documents of ten 100-byte fields (keys uniform, not
zipfian): A 50/50 read/update, B 95/5, C reads only (reads by `_id`, updates `$set` one field,
acknowledged with `j: true` likewise). Then the emulator's rs3 inserts at w:1 and w:majority.
Each cell runs `--seconds`; printed: ops/s, p50 and p99 latency, and emulator/FerretDB; for the
inserts also the server's CPU per insert (its processes' user+system time over the cell, all
three members' for rs3): what a server costs apart from the client and the disk's fsync.

Both inserts are bound by the disk's fsync, whose latency here moves several-fold from one minute
to the next (a run of 2026-12-01 saw FerretDB's one-thread inserts at 426/s, another a few minutes
later at 858/s). So both servers stay up and the insert cells take turns, `--rounds` times (the
emulator's, then FerretDB's, for each thread count): each round's ratio compares cells a few
seconds apart, and the ratio printed is the median of the rounds'.

Usage: python bench/emulator_vs_ferretdb.py [--seconds 4] [--records 2000] [--threads 1,8]
       [--rounds 3] [--only emulator]   (the emulator's rows only: for a before/after of a change)
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pymongo import MongoClient, WriteConcern
from pymongo.collection import Collection

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rsdrill.platforms.sandbox.hosts import free_port_base
from rsdrill.procstat import cpu_seconds
from rsdrill.sandbox.cluster import EmulatorEngine, up
from rsdrill.sandbox.config import build_topology
from tests.harness.ferretdb import ferretdb

FIELDS = 10
FIELD_BYTES = 100
RECORD = {f"field{f}": "x" * FIELD_BYTES for f in range(FIELDS)}
MIXES = {"A": 0.5, "B": 0.95, "C": 1.0}  # the share of reads


@dataclass
class Cell:
    ops: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    errors: int = 0
    server_cpu_s: float | None = None
    client_cpu_s: float | None = None

    def server_ms_per_op(self) -> float | None:
        return _per_op(self.server_cpu_s, self.ops)

    def client_ms_per_op(self) -> float | None:
        return _per_op(self.client_cpu_s, self.ops)

    def per_s(self, seconds: float) -> float:
        return self.ops / seconds

    def percentile(self, share: float) -> float:
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else 0.0


def _per_op(cpu_s: float | None, ops: int) -> float | None:
    return None if cpu_s is None or not ops else 1000 * cpu_s / ops


def _record(i: int) -> dict[str, Any]:
    return {"_id": i, **RECORD}


def _drive(threads: int, seconds: float, op: Callable[[random.Random, int], None]) -> Cell:
    """`op(rng, n)` from `threads` threads for `seconds`; n counts each thread's calls."""
    cells = [Cell() for _ in range(threads)]
    stop = time.monotonic() + seconds

    def worker(index: int) -> None:
        cell, rng = cells[index], random.Random(index)
        while time.monotonic() < stop:
            started = time.perf_counter()
            try:
                op(rng, index * 10_000_000 + cell.ops)
            except Exception:
                cell.errors += 1
                continue
            cell.latencies_ms.append((time.perf_counter() - started) * 1000)
            cell.ops += 1

    running = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for thread in running:
        thread.start()
    for thread in running:
        thread.join()
    return Cell(sum(c.ops for c in cells), [x for c in cells for x in c.latencies_ms],
                sum(c.errors for c in cells))  # fmt: skip


def _cpu_s(pids: list[int]) -> float:
    """User+system CPU seconds of the processes `pids` (every thread's) so far."""
    total = 0.0
    for pid in pids:
        used = cpu_seconds(pid)
        if used is None:
            raise RuntimeError(f"server process {pid} is gone")
        total += used
    return total


def _inserts(server: Server, args: argparse.Namespace, threads: int, name: str,
             w: int | str = 1) -> Cell:  # fmt: skip
    """Journaled inserts into a new collection `name` from `threads` threads."""
    client: MongoClient[Any]
    with MongoClient(server.uri, maxPoolSize=threads + 2) as client:
        coll: Collection[Any] = client.bench.get_collection(
            name, write_concern=WriteConcern(w=w, j=True)
        )
        coll.database.command("ping")

        def insert(_: random.Random, n: int) -> None:
            coll.insert_one({**RECORD, "_id": n})

        pids = server.pids()
        before, mine = _cpu_s(pids), time.process_time()
        cell = _drive(threads, args.seconds, insert)
        cell.server_cpu_s = _cpu_s(pids) - before
        cell.client_cpu_s = time.process_time() - mine
        return cell


def _ycsb(uri: str, args: argparse.Namespace) -> Iterator[tuple[str, Cell]]:
    """The YCSB-like cells against one server, each named by its row, in a fixed order."""
    client: MongoClient[Any]
    with MongoClient(uri, maxPoolSize=max(args.threads) + 2) as client:
        concern = WriteConcern(w=1, j=True)
        table: Collection[Any] = client.bench.get_collection("usertable", write_concern=concern)
        table.insert_many([_record(i) for i in range(args.records)])
        for mix, reads in MIXES.items():
            for threads in args.threads:

                def operate(rng: random.Random, _: int, reads: float = reads) -> None:
                    key = rng.randrange(args.records)
                    if rng.random() < reads:
                        assert table.find_one({"_id": key}) is not None
                    else:
                        field_name = f"field{rng.randrange(FIELDS)}"
                        table.update_one({"_id": key}, {"$set": {field_name: "y" * FIELD_BYTES}})

                yield f"{mix} x{threads}", _drive(threads, args.seconds, operate)


@dataclass(frozen=True)
class Server:
    uri: str
    pids: Callable[[], list[int]]  # its processes now


@contextmanager
def _emulator(directory: Path, topology: str) -> Iterator[Server]:
    sandbox = up(directory, build_topology(topology, port_base=free_port_base(3)),
                 EmulatorEngine())  # fmt: skip

    def pids() -> list[int]:
        found = [sandbox.pid(member) for member in sandbox.spec.members]
        return [pid for pid in found if pid is not None]

    try:
        yield Server(sandbox.uri, pids)
    finally:
        sandbox.down()


def _line(server: str, row: str, cell: Cell, seconds: float) -> str:
    p50, p99 = cell.percentile(0.5), cell.percentile(0.99)
    errors = f"  {cell.errors} errors" if cell.errors else ""
    rate = cell.per_s(seconds)
    server_ms, client_ms = cell.server_ms_per_op(), cell.client_ms_per_op()
    cpu = (f"  CPU/op server {server_ms:.3f} ms, client {client_ms:.3f} ms"
           if server_ms is not None and client_ms is not None else "")  # fmt: skip
    return (f"{server:10s} {row:10s} {rate:8.0f} ops/s  p50 {p50:7.2f} ms  p99 {p99:7.2f} ms"
            f"{cpu}{errors}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="each cell's length")
    parser.add_argument("--records", type=int, default=2000, help="YCSB documents preloaded")
    parser.add_argument("--threads", type=lambda s: [int(t) for t in s.split(",")],
                        default=[1, 8], help="client threads, comma-separated")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=3, help="turns of the insert cells")
    parser.add_argument("--only", choices=["emulator"], help="skip FerretDB")
    args = parser.parse_args()
    servers: list[tuple[str, Callable[[Path], Any]]] = [("emulator", _standalone)]
    if args.only is None:
        servers.append(("ferretdb", _ferretdb_server))
    # results[server][row]: a cell per round for the inserts, one for the YCSB rows
    results: dict[str, dict[str, list[Cell]]] = {name: {} for name, _ in servers}
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as running:
        started = {name: running.enter_context(start(Path(tmp) / name))
                   for name, start in servers}  # fmt: skip
        for round_ in range(1, args.rounds + 1):
            for threads in args.threads:
                row = f"insert x{threads}"
                for name, server in started.items():
                    cell = _inserts(server, args, threads, f"inserts-r{round_}-x{threads}")
                    results[name].setdefault(row, []).append(cell)
                    print(_line(name, f"{row} r{round_}", cell, args.seconds), flush=True)
        for name, server in started.items():
            for row, cell in _ycsb(server.uri, args):
                results[name][row] = [cell]
                print(_line(name, row, cell, args.seconds), flush=True)
        with _emulator(Path(tmp) / "rs3", "rs3") as rs3:
            for w in (1, "majority"):
                for threads in args.threads:
                    cell = _inserts(rs3, args, threads, f"inserts-w{w}-x{threads}", w)
                    print(_line(f"rs3 w:{w}", f"insert x{threads}", cell, args.seconds),
                          flush=True)  # fmt: skip
    if "ferretdb" in results:
        print("\nemulator / FerretDB (ops/s; the inserts: each round's, and their median)")
        for row, cells in results["emulator"].items():
            ratios = [
                mine.per_s(args.seconds) / theirs.per_s(args.seconds)
                if theirs.ops else float("inf")
                for mine, theirs in zip(cells, results["ferretdb"][row], strict=True)
            ]  # fmt: skip
            rounds = (
                f"  (rounds: {', '.join(f'{r:.2f}' for r in ratios)})" if len(ratios) > 1 else ""
            )
            print(f"  {row:10s} {statistics.median(ratios):6.2f}x{rounds}")
        _cpu_table(results, args.seconds, os.cpu_count() or 1)


def _cpu_table(results: dict[str, dict[str, list[Cell]]], seconds: float, cpus: int) -> None:
    """Each side's server CPU per journaled insert, and what this machine's CPUs allow: with
    this client's CPU per insert beside a server's, `cpus` CPUs serve at most
    cpus / (client + server) inserts a second, and cpus / client with a server that cost
    nothing. Medians of the rounds."""
    print(f"\nCPU per journaled insert (ms; medians of the rounds) and the most {cpus} CPUs allow")
    for row, cells in results["emulator"].items():
        if not row.startswith("insert"):
            continue
        theirs = results["ferretdb"][row]
        server = statistics.median(c.server_ms_per_op() or 0.0 for c in cells)
        client = statistics.median(c.client_ms_per_op() or 0.0 for c in cells)
        ferret = statistics.median(c.server_ms_per_op() or 0.0 for c in theirs)
        ferret_rate = statistics.median(c.per_s(seconds) for c in theirs)
        print(f"  {row:10s} server: emulator {server:.3f}, FerretDB {ferret:.3f} "
              f"({server / ferret:.2f}x); client {client:.3f}: at most "
              f"{1000 * cpus / (client + server):.0f}/s with the emulator, "
              f"{1000 * cpus / client:.0f}/s with a free server "
              f"(FerretDB's {ferret_rate:.0f}/s)")  # fmt: skip


def _standalone(directory: Path) -> Any:
    return _emulator(directory, "standalone")


@contextmanager
def _ferretdb_server(directory: Path) -> Iterator[Server]:
    with ferretdb(directory) as server:
        yield Server(server.uri, lambda: [pid] if (pid := server.pid()) is not None else [])


if __name__ == "__main__":
    main()
