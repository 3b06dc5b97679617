"""Write-path cost of the emulator: single-document writes on an rs3 primary, as the probes make.

Times a loop of insert_one then update_one (by `_id`) with w:1 and w:majority on a fresh rs3,
and prints ops/s and latency percentiles per kind, and the CPU each operation cost the three
members together and this client (ms, from /proc): the steadier figure of the two on this
machine, whose calm and busy hours move ops/s by 20-30 % for the same tree. `--unique-index`
first creates a unique index on the written field, to show what enforcing it costs. To compare
with another tree's code (say, the commit before a change), run it from that tree's directory,
`cd <that tree> && PYTHONPATH=. python bench/write_path.py`: a tree before 67e45ab starts its
members as `python -m`, which puts the caller's directory first on their import path, so there
PYTHONPATH alone from this checkout measures this checkout's members.

Usage: python bench/write_path.py [--ops 2000] [--port-base 29417] [--unique-index]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from pymongo import MongoClient, WriteConcern

from rsdrill.procstat import cpu_seconds
from rsdrill.sandbox.cluster import EmulatorEngine, up
from rsdrill.sandbox.config import build_topology


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def _cpu_s(pids: list[int]) -> float:
    """User and system CPU seconds the processes have used (those gone count nothing)."""
    return sum(cpu_seconds(pid) or 0.0 for pid in pids)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=2000, help="writes per kind")
    parser.add_argument("--port-base", type=int, default=29417)
    parser.add_argument("--unique-index", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sandbox = up(Path(tmp) / "sandbox", build_topology("rs3", port_base=args.port_base),
                     EmulatorEngine())  # fmt: skip
        try:
            members = [pid for m in sandbox.spec.members if (pid := sandbox.pid(m)) is not None]
            with MongoClient(sandbox.uri) as client:
                for w in (1, "majority"):
                    coll = client.bench.get_collection(f"w{w}", write_concern=WriteConcern(w=w))
                    if args.unique_index:
                        coll.create_index("seq", unique=True)
                    for kind in ("insert", "update"):
                        latencies = []
                        member_cpu, client_cpu = _cpu_s(members), time.process_time()
                        started = time.monotonic()
                        for i in range(args.ops):
                            t0 = time.perf_counter()
                            if kind == "insert":
                                coll.insert_one({"_id": i, "seq": i, "pad": "x" * 100})
                            else:
                                coll.update_one({"_id": i}, {"$set": {"seq": i + args.ops}})
                            latencies.append((time.perf_counter() - t0) * 1000)
                        elapsed = time.monotonic() - started
                        member_cpu = _cpu_s(members) - member_cpu
                        client_cpu = time.process_time() - client_cpu
                        print(
                            f"w:{w!s:8s} {kind:6s} {args.ops / elapsed:7.0f} ops/s  "
                            f"p50 {statistics.median(latencies):.2f} ms  "
                            f"p99 {_percentile(latencies, 0.99):.2f} ms  "
                            f"CPU/op members {member_cpu / args.ops * 1000:.2f} ms  "
                            f"client {client_cpu / args.ops * 1000:.2f} ms",
                            flush=True,
                        )
        finally:
            sandbox.down()


if __name__ == "__main__":
    main()
