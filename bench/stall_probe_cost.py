"""What the stall probe (rsdrill/probes/stall.py) costs, and how late its wake-ups come here.

In this otherwise idle process, alternating rounds of `--seconds` each: the process's CPU time
with no probe running and with the stall probe running (the difference is the probe's cost, in
CPU-seconds per second, i.e. the share of one core), and the stalls it recorded (a quiet
process should record none, or few on a loaded machine). Then one round with its threshold at 0,
so every wake-up is recorded: the lateness of a wake-up at the median, p99 and max, to compare
with the threshold (`LATE_S`, 100 ms).

Usage: python bench/stall_probe_cost.py [--seconds 10] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rsdrill.history import History, RunClock
from rsdrill.probes import stall
from rsdrill.probes.stall import StallProbe


def cpu_per_s(seconds: float, with_probe: bool) -> tuple[float, History]:
    """CPU-seconds per second of this process over `seconds`; the probe's history."""
    history = History()
    probe = StallProbe(history, RunClock.start())
    cpu0, wall0 = time.process_time(), time.monotonic()
    if with_probe:
        probe.start()
    time.sleep(seconds)
    if with_probe:
        probe.stop()
        probe.join()
    return (time.process_time() - cpu0) / (time.monotonic() - wall0), history


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(
        f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores, {args.seconds:g} s rounds"
    )
    costs = []
    for k in range(args.rounds):
        idle, _ = cpu_per_s(args.seconds, with_probe=False)
        busy, history = cpu_per_s(args.seconds, with_probe=True)
        costs.append(busy - idle)
        late = [round(op.t_end - op.t_start, 3) for op in history]
        print(
            f"round {k + 1}: idle {idle * 1000:.2f} ms/s, with the probe {busy * 1000:.2f} "
            f"ms/s: cost {(busy - idle) * 1000:.2f} ms CPU per s ({(busy - idle) * 100:.2f} % "
            f"of a core); stalls recorded {len(late)} {late}"
        )
    print(f"cost median {statistics.median(costs) * 1000:.2f} ms CPU per s")
    threshold_ms = stall.LATE_S * 1000
    stall.LATE_S = 0.0  # record every wake-up, to see how late they come
    _, history = cpu_per_s(args.seconds, with_probe=True)
    late_ms = sorted((op.t_end - op.t_start) * 1000 for op in history)
    p99 = late_ms[int(len(late_ms) * 0.99)]
    print(
        f"wake-ups {len(late_ms)} in {args.seconds:g} s: late median "
        f"{statistics.median(late_ms):.2f} ms, p99 {p99:.2f} ms, max {late_ms[-1]:.2f} ms "
        f"(threshold {threshold_ms:.0f} ms)"
    )


if __name__ == "__main__":
    main()
