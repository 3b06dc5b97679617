"""Time from `sandbox up` to a writable primary (and `down` to nothing running), repeated.

Usage: python bench/sandbox_up.py [--runs 5] [--topology rs3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from pymongo import MongoClient, WriteConcern

from rsdrill.sandbox.cluster import EmulatorEngine, up
from rsdrill.sandbox.config import build_topology


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--topology", default="rs3")
    parser.add_argument("--port-base", type=int, default=29517)
    args = parser.parse_args()
    ups, firsts, downs = [], [], []
    for run in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            spec = build_topology(args.topology, port_base=args.port_base)
            started = time.monotonic()
            sandbox = up(Path(tmp) / "sandbox", spec, EmulatorEngine())
            ups.append(time.monotonic() - started)
            with MongoClient(sandbox.uri) as client:
                coll = client.bench.get_collection("c", write_concern=WriteConcern(w="majority"))
                coll.insert_one({"run": run})
            firsts.append(time.monotonic() - started)
            started = time.monotonic()
            left = sandbox.down()
            downs.append(time.monotonic() - started)
            assert not sandbox.running(), f"processes left running: {left}"
        print(
            f"run {run + 1}: up {ups[-1]:.2f}s  first majority write {firsts[-1]:.2f}s  "
            f"down {downs[-1]:.2f}s",
            flush=True,
        )
    for name, values in (("up", ups), ("first write", firsts), ("down", downs)):
        print(f"{name:12s} median {statistics.median(values):.2f}s  max {max(values):.2f}s")


if __name__ == "__main__":
    main()
