"""The list-append checker's cost (rsdrill/analysis/elle.py): time and peak memory to check a
history of 10 000 to 100 000 transactions, and the growth between them.

Histories are made as a workload would: 1-4 micro-ops per transaction over a pool of keys,
half appends, half reads of the whole list, each key retired after 32 appends (as Elle's
workloads bound a list's length), executed in one serial order (serializable: the checker
must find nothing) — or, with --anomalies, one read skew planted per 1 000 transactions (each
must be found: every strongly connected component is searched). Each size runs in a process
of its own, so the peak resident size is the checker's and its history's alone.

Issue 30's bound: 100 000 operations in <= 10 s and <= 1 GiB on 2 cores.

    python bench/elle_check.py [--sizes 10000,30000,100000] [--anomalies] [--seed 1]
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import resource
import time
from typing import Any

from rsdrill.analysis.elle import Append, Read, Txn, check

KEYS = 64
TXN_LEN = (1, 4)
MAX_APPENDS_PER_KEY = 32
BOUND_S, BOUND_MIB = 10.0, 1024.0


def history(n: int, seed: int, anomalies: bool) -> list[Txn]:
    rng = random.Random(seed)
    lists: dict[str, list[int]] = {}
    live = [f"k{i}" for i in range(KEYS)]
    next_key, counter = KEYS, 0
    txns: list[Txn] = []
    for i in range(n):
        if anomalies and i % 1000 == 999:
            # Read skew: a writer appends to two fresh keys; the next reads one and not the other.
            a, b = f"skew{i}a", f"skew{i}b"
            counter += 2
            txns.append(Txn(len(txns), (Append(a, counter - 1), Append(b, counter))))
            txns.append(Txn(len(txns), (Read(a, (counter - 1,)), Read(b, ()))))
            continue
        mops: list[Append | Read] = []
        for _ in range(rng.randint(*TXN_LEN)):
            slot = rng.randrange(len(live))
            key = live[slot]
            if rng.random() < 0.5:
                counter += 1
                values = lists.setdefault(key, [])
                values.append(counter)
                mops.append(Append(key, counter))
                if len(values) >= MAX_APPENDS_PER_KEY:
                    live[slot] = f"k{next_key}"
                    next_key += 1
            else:
                mops.append(Read(key, tuple(lists.get(key, []))))
        txns.append(Txn(len(txns), tuple(mops)))
    return txns


def measure(n: int, seed: int, anomalies: bool) -> dict[str, Any]:
    txns = history(n, seed, anomalies)
    started = time.perf_counter()
    report = check(txns)
    took = time.perf_counter() - started
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"n": len(txns), "mops": sum(len(t.mops) for t in txns), "s": took,
            "peak_mib": peak_mib, "cycles": len(report.cycles),
            "types": report.anomaly_types}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,30000,100000")
    parser.add_argument("--anomalies", action="store_true", help="one read skew per 1000")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rows = []
    context = multiprocessing.get_context("spawn")
    for n in (int(s) for s in args.sizes.split(",")):
        with context.Pool(1) as pool:
            row = pool.apply(measure, (n, args.seed, args.anomalies))
        rows.append(row)
        print(f"{row['n']:>7} txns {row['mops']:>7} micro-ops: {row['s']:6.2f} s  "
              f"peak {row['peak_mib']:7.1f} MiB  cycles {row['cycles']:>4}  "
              f"{', '.join(row['types']) or 'no anomaly'}", flush=True)  # fmt: skip
    first, last = rows[0], rows[-1]
    growth = (last["s"] / first["s"]) / (last["n"] / first["n"]) if first["s"] else float("nan")
    print(f"growth {first['n']} → {last['n']} txns: time x{last['s'] / first['s']:.1f} for "
          f"x{last['n'] / first['n']:.1f} the transactions (x{growth:.2f} per "
          "transaction)")  # fmt: skip
    verdict = "within" if last["s"] <= BOUND_S and last["peak_mib"] <= BOUND_MIB else "OVER"
    print(
        f"{last['n']} txns: {last['s']:.2f} s (bound {BOUND_S:g} s), {last['peak_mib']:.0f} MiB "
        f"(bound {BOUND_MIB:g} MiB): {verdict} issue 30's bound"
    )


if __name__ == "__main__":
    main()
