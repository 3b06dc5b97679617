"""Time from `sandbox up` to a writable primary (and `down` to nothing running), repeated.

`--topology sharded`: a sharded sandbox (config servers, two rs3 shards, two routers) to its
first w:majority write through the routers (issue 31's bound: 5 s on 2 cores).

Usage: python bench/sandbox_up.py [--runs 5] [--topology rs3|sharded]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from pymongo import MongoClient, WriteConcern

from rsdrill.sandbox.cluster import EmulatorEngine, Sandbox, up
from rsdrill.sandbox.config import build_topology
from rsdrill.sandbox.sharded import ShardedSandbox, up_sharded


def _start(topology: str, directory: Path, port_base: int) -> Sandbox | ShardedSandbox:
    if topology == "sharded":
        return up_sharded(directory, port_base=port_base)
    return up(directory, build_topology(topology, port_base=port_base), EmulatorEngine())


def _running(sandbox: Sandbox | ShardedSandbox) -> list[int]:
    if isinstance(sandbox, Sandbox):
        return list(sandbox.running().values())
    routers = [pid for h in sandbox.spec.routers if (pid := sandbox.router_pid(h)) is not None]
    return routers + [pid for s in sandbox.sets.values() for pid in s.running().values()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--topology", default="rs3")
    parser.add_argument("--port-base", type=int, default=29517)
    args = parser.parse_args()
    ups, firsts, downs = [], [], []
    for run in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            started = time.monotonic()
            sandbox = _start(args.topology, Path(tmp) / "sandbox", args.port_base)
            ups.append(time.monotonic() - started)
            with MongoClient(sandbox.uri) as client:
                coll = client.bench.get_collection("c", write_concern=WriteConcern(w="majority"))
                coll.insert_one({"run": run})
            firsts.append(time.monotonic() - started)
            started = time.monotonic()
            left = sandbox.down()
            downs.append(time.monotonic() - started)
            assert not _running(sandbox), f"processes left running after stopping {left}"
        print(
            f"run {run + 1}: up {ups[-1]:.2f}s  first majority write {firsts[-1]:.2f}s  "
            f"down {downs[-1]:.2f}s",
            flush=True,
        )
    for name, values in (("up", ups), ("first write", firsts), ("down", downs)):
        print(f"{name:12s} median {statistics.median(values):.2f}s  max {max(values):.2f}s")


if __name__ == "__main__":
    main()
