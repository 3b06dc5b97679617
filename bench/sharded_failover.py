"""A shard primary's host killed under writes through the routers: that shard's write gap, every
other shard's longest gap, and the routers' retarget time, over several runs; or, with
`--victim config`, the config servers' primary killed: every shard's longest gap (writes to
existing chunks need no config server).

Each run starts a sharded sandbox (config servers, two rs3 shards, two routers), shards a
collection on a hashed key, and writes every `--interval` to one key of each shard through
the routers (retryable writes, pymongo's defaults). It SIGKILLs shard0's primary, watches
shard0's members directly (hello every 10 ms) for the new writable primary, and prints:
- shard0's longest gap between acknowledged writes (bounded by its election);
- shard1's longest gap after the kill, against issue 31's bound 2 x interval + 50 ms;
- retarget: from shard0's new primary answering writable to the first write through a
  router acknowledged on it (mongos_retarget_s).

Usage: python bench/sharded_failover.py [--runs 5] [--interval 0.02] [--election-timeout-ms 10000]
       [--victim shard0|config]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from pymongo import MongoClient
from pymongo.errors import PyMongoError

from rsdrill.connection import ConnectOptions
from rsdrill.sandbox.config import CONFIG_SET, Settings
from rsdrill.sandbox.members import hello
from rsdrill.sandbox.sharded import ShardedSandbox, up_sharded
from rsdrill_emulator.shardkey import hash64


def owned_key(client: MongoClient[dict[str, Any]], ns: str, shard: str) -> int:
    """A value of `k` whose hash is in a chunk `shard` owns."""
    uuid = client["config"]["collections"].find_one({"_id": ns})["uuid"]
    chunks = list(client["config"]["chunks"].find({"uuid": uuid, "shard": shard}))

    def owned(h: int) -> bool:
        return any(
            (not isinstance(c["min"]["k"], int) or h >= c["min"]["k"])
            and (not isinstance(c["max"]["k"], int) or h < c["max"]["k"])
            for c in chunks
        )

    return next(k for k in itertools.count() if owned(hash64(k)))


def longest_gap(times: list[float]) -> float:
    return max((b - a for a, b in itertools.pairwise(times)), default=float("inf"))


def one_run(
    cluster: ShardedSandbox, interval: float, settle_s: float, victim_set: str
) -> dict[str, float]:
    client: MongoClient[dict[str, Any]]
    with MongoClient(cluster.uri, serverSelectionTimeoutMS=30_000) as client:
        client.admin.command("shardCollection", "bench.ledger", key={"k": "hashed"})
        keys = {s: owned_key(client, "bench.ledger", s) for s in cluster.spec.shards}
        ledger = client["bench"]["ledger"]
        acks: dict[str, list[float]] = {s: [] for s in keys}
        stop = threading.Event()

        def write(shard: str) -> None:
            while not stop.is_set():
                try:
                    ledger.insert_one({"k": keys[shard]})
                    acks[shard].append(time.monotonic())
                except PyMongoError:
                    pass
                time.sleep(interval)

        writers = [threading.Thread(target=write, args=(s,)) for s in keys]
        for writer in writers:
            writer.start()
        time.sleep(2.0)
        victim = cluster.sets[victim_set]
        old = victim.resolve("primary")
        killed_at = time.monotonic()
        victim.kill(old)
        others = [m.host for m in victim.spec.members if m.host != old.host]
        writable_at = float("nan")
        while time.monotonic() - killed_at < 60:
            if any(
                (hello(h, options=ConnectOptions()) or {}).get("isWritablePrimary") for h in others
            ):
                writable_at = time.monotonic()
                break
            time.sleep(0.01)
        time.sleep(settle_s)
        stop.set()
        for writer in writers:
            writer.join()
    after = {s: [t for t in times if t > killed_at - 1.0] for s, times in acks.items()}
    first_ack = next((t for t in after.get(victim_set, []) if t > writable_at), float("nan"))
    return {
        "shard0_gap_s": longest_gap(after["shard0"]),
        "shard1_gap_s": longest_gap(after["shard1"]),
        "new_primary_s": writable_at - killed_at,
        "retarget_s": first_ack - writable_at,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--interval", type=float, default=0.02)
    parser.add_argument("--election-timeout-ms", type=int, default=10_000)
    parser.add_argument("--port-base", type=int, default=29700)
    parser.add_argument(
        "--victim",
        choices=("shard0", "config"),
        default="shard0",
        help="whose primary is killed: shard0's or the config servers'",
    )
    args = parser.parse_args()
    bound = 2 * args.interval + 0.05
    settle = args.election_timeout_ms / 1000 + 5
    rows = []
    for run in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            cluster = up_sharded(
                Path(tmp) / "sharded",
                port_base=args.port_base,
                settings=Settings(election_timeout_ms=args.election_timeout_ms),
            )
            try:
                row = one_run(cluster, args.interval, settle,
                              CONFIG_SET if args.victim == "config" else "shard0")  # fmt: skip
            finally:
                cluster.down(grace_s=2.0)
        rows.append(row)
        if args.victim == "config":  # both shards are the "other" ones
            print(
                f"run {run + 1}: config's new primary after {row['new_primary_s']:.3f}s; "
                f"longest gap shard0 {row['shard0_gap_s'] * 1000:.0f} ms "
                f"({row['shard0_gap_s'] / bound:.2f}x), shard1 {row['shard1_gap_s'] * 1000:.0f}"
                f" ms ({row['shard1_gap_s'] / bound:.2f}x) (bound {bound * 1000:.0f} ms)",
                flush=True,
            )
        else:
            print(
                f"run {run + 1}: shard0 gap {row['shard0_gap_s']:.3f}s (new primary after "
                f"{row['new_primary_s']:.3f}s, retarget {row['retarget_s'] * 1000:.0f} ms); "
                f"shard1 longest gap {row['shard1_gap_s'] * 1000:.0f} ms "
                f"(bound {bound * 1000:.0f} ms: {row['shard1_gap_s'] / bound:.2f}x)",
                flush=True,
            )
    names = ["shard0_gap_s", "new_primary_s", "shard1_gap_s"]
    for name in names if args.victim == "config" else [*names[:2], "retarget_s", names[2]]:
        values = [r[name] for r in rows]
        print(
            f"{name:15s} median {statistics.median(values):.3f}s  "
            f"min {min(values):.3f}s  max {max(values):.3f}s"
        )


if __name__ == "__main__":
    main()
