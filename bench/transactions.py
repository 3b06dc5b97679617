"""What transactions cost on the sandbox: plain writes while no one reads from a snapshot and
while the snapshot history records, and transactions end to end (w:majority commit).

Usage: python bench/transactions.py [--writes 1000] [--transactions 200] [--port-base N]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pymongo import MongoClient, WriteConcern
from pymongo.read_concern import ReadConcern

from rsdrill.sandbox.cluster import EmulatorEngine, up
from rsdrill.sandbox.config import build_topology


def _timed(count: int, operation: Callable[[int], Any]) -> list[float]:
    """Seconds each of `count` calls took."""
    out = []
    for i in range(count):
        started = time.perf_counter()
        operation(i)
        out.append(time.perf_counter() - started)
    return out


def _report(name: str, seconds: list[float]) -> None:
    ordered = sorted(seconds)
    p95 = ordered[int(0.95 * (len(ordered) - 1))]
    print(f"{name:36s} {len(seconds) / sum(seconds):8.0f} /s   median "
          f"{1000 * statistics.median(seconds):6.2f} ms   p95 {1000 * p95:6.2f} ms")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=1000)
    parser.add_argument("--transactions", type=int, default=200)
    parser.add_argument("--port-base", type=int, default=29537)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sandbox = up(Path(tmp) / "sandbox", build_topology("rs3", port_base=args.port_base),
                     EmulatorEngine())  # fmt: skip
        try:
            with MongoClient(sandbox.uri) as client:
                coll = client.bench.get_collection("c", write_concern=WriteConcern(w=1))
                coll.insert_many([{"_id": f"seed-{i}", "n": 0} for i in range(100)])
                _timed(args.writes // 2, lambda i: coll.insert_one({"_id": f"warm-{i}"}))
                _report(
                    "insert w:1, no snapshot reader",
                    _timed(args.writes, lambda i: coll.insert_one({"_id": f"a-{i}"})),
                )
                # A snapshot read starts the history: every write now keeps a pre-image.
                with client.start_session(snapshot=True) as reader:
                    coll.find_one({}, session=reader)
                    _report(
                        "insert w:1, history recording",
                        _timed(args.writes, lambda i: coll.insert_one({"_id": f"b-{i}"})),
                    )
                    _report(
                        "update w:1, history recording",
                        _timed(
                            args.writes,
                            lambda i: coll.update_one(
                                {"_id": f"seed-{i % 100}"}, {"$inc": {"n": 1}}
                            ),
                        ),
                    )

                def transfer(i: int) -> None:
                    with client.start_session() as session:
                        session.start_transaction(
                            read_concern=ReadConcern("snapshot"),
                            write_concern=WriteConcern(w="majority"),
                        )
                        coll.update_one(
                            {"_id": f"seed-{i % 100}"}, {"$inc": {"n": -1}}, session=session
                        )
                        coll.insert_one({"_id": f"t-{i}"}, session=session)
                        session.commit_transaction()

                _report("transaction (2 writes, w:majority)",
                        _timed(args.transactions, transfer))  # fmt: skip
        finally:
            sandbox.down()


if __name__ == "__main__":
    main()
