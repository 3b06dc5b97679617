"""What handing a member's commit to another thread costs: a commit-like job (a 200-byte
append and its fsync) awaited from a uvloop loop, one at a time, run inline (blocking the
loop, the floor), through `asyncio.to_thread` and through the member's storage thread
(rsdrill_emulator/storage_thread.py). Prints per commit the process CPU and the wall time
(p50/p99) of each way, and the storage thread's figures as ratios of to_thread's. Rounds
alternate the ways; medians over rounds.

Usage: python bench/storage_handoff.py [--commits 3000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable

import uvloop

from rsdrill_emulator.storage_thread import StorageThread

Way = Callable[[Callable[[], None]], Awaitable[None]]


def commit_job(fd: int) -> Callable[[], None]:
    record = b"x" * 200

    def commit() -> None:
        os.write(fd, record)
        os.fsync(fd)

    return commit


async def measure(way_name: str, commits: int, fd: int) -> tuple[float, float, float]:
    """(CPU us, wall p50 us, wall p99 us) per commit."""
    job = commit_job(fd)

    async def inline(call: Callable[[], None]) -> None:
        call()

    way: Way
    if way_name == "storage thread":  # its thread only where it is measured
        way = StorageThread(asyncio.get_running_loop()).run
    else:
        way = {"inline": inline, "to_thread": asyncio.to_thread}[way_name]
    for _ in range(50):  # the executor's thread and the page cache warmed
        await way(job)
    walls: list[float] = []
    cpu_before = time.process_time()
    for _ in range(commits):
        started = time.perf_counter()
        await way(job)
        walls.append(time.perf_counter() - started)
    cpu = time.process_time() - cpu_before
    walls.sort()
    return (
        cpu / commits * 1e6,
        walls[len(walls) // 2] * 1e6,
        walls[int(len(walls) * 0.99)] * 1e6,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--commits", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    names = ["inline", "to_thread", "storage thread"]
    figures: dict[str, list[tuple[float, float, float]]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory() as scratch:
        fd = os.open(os.path.join(scratch, "log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            for round_ in range(args.rounds):
                order = names if round_ % 2 == 0 else list(reversed(names))
                for name in order:
                    figures[name].append(uvloop.run(measure(name, args.commits, fd)))
        finally:
            os.close(fd)
    print(f"{args.commits} commits x {args.rounds} rounds, medians; us per commit")
    print(f"{'way':<16}{'CPU':>8}{'wall p50':>10}{'wall p99':>10}")
    medians: dict[str, tuple[float, ...]] = {}
    for name in names:
        medians[name] = tuple(statistics.median(f[i] for f in figures[name]) for i in range(3))
        cpu, p50, p99 = medians[name]
        print(f"{name:<16}{cpu:>8.0f}{p50:>10.0f}{p99:>10.0f}")
    ours, theirs = medians["storage thread"], medians["to_thread"]
    print(
        f"storage thread / to_thread: CPU {ours[0] / theirs[0]:.2f}x, "
        f"wall p50 {ours[1] / theirs[1]:.2f}x"
    )


if __name__ == "__main__":
    main()
