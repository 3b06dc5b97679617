"""A standalone server killed and restarted after a delay: the server's own write gap and the one
an application (pymongo) sees, against the server's event log (issue 14's figure).

Runs a standalone host-kill with `restart: {after: DELAY}` N times through `run_experiment`.
Truth: K = the kill, B = the restarted server's first "writable" event; down = B - K (the delay
plus the server's start time). Judged: raw_write_unavailable_s (rsdrill's wire client) within
[DELAY, down + 2 x the probe interval]; driver_write_delay_s (write_unavailable_s - raw: pymongo's
re-check of a server it marked Unknown, at most every minHeartbeatFrequencyMS = 500 ms) at most
0.5 s + 2 intervals. Prints a line per run, then the ranges and the probes' ops/s.

Usage: python bench/standalone_gap.py [--runs 5] [--restart-after 10s]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rsdrill.engine.options import RunOptions
from rsdrill.engine.runner import run_experiment
from rsdrill.experiment.schema import Experiment, format_duration, parse_duration
from rsdrill.sandbox.groundtruth import first_after

INTERVAL_S = 0.02
PYMONGO_RECHECK_S = 0.5  # minHeartbeatFrequencyMS


@dataclass(frozen=True)
class Run:
    down_s: float
    raw_s: float
    application_s: float
    driver_delay_s: float
    ops_per_s: float


def experiment(restart_after_s: float) -> Experiment:
    return Experiment.model_validate(
        {
            "name": "bench-standalone-kill",
            "target": {"platform": "sandbox", "topology": "standalone"},
            "probes": {"availability": {"interval": INTERVAL_S, "timeout": "250ms"}},
            "faults": [
                {
                    "at": "2s",
                    "kind": "host-kill",
                    "select": "primary",
                    "restart": {"after": restart_after_s},
                }
            ],
            "guards": {"allow_quorum_loss": True},
            "observe": {"after_revert": "3s"},
        }
    )


def measure(exp: Experiment, out_dir: Path) -> Run:
    result = run_experiment(exp, RunOptions(out_dir=out_dir, live=False, journal_dir=out_dir))
    if result.verdict != "pass" or result.clock is None:
        raise RuntimeError(f"run {out_dir} ended {result.verdict}: {result.error}")
    injected = result.faults[0].injected_at_s
    assert injected is not None
    kill = result.clock.t0_monotonic + injected
    back = first_after(out_dir / "sandbox", "writable", kill)
    m = result.metrics
    if back is None or None in (m.raw_write_unavailable_s, m.write_unavailable_s):
        raise RuntimeError(f"run {out_dir}: no restart seen or a gap missing: {m}")
    assert m.raw_write_unavailable_s is not None and m.write_unavailable_s is not None
    assert m.driver_write_delay_s is not None and m.probe_ops_per_s is not None
    return Run(back["t_mono"] - kill, m.raw_write_unavailable_s, m.write_unavailable_s,
               m.driver_write_delay_s, m.probe_ops_per_s)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--restart-after", type=parse_duration, default=10.0)
    args = parser.parse_args()
    delay = args.restart_after
    print(f"standalone host-kill, restart after {format_duration(delay)}, {args.runs} runs, "
          f"probes every {INTERVAL_S * 1000:g} ms")  # fmt: skip
    runs, misses = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            r = measure(experiment(delay), Path(tmp) / f"run-{i + 1:02d}")
            runs.append(r)
            raw_ok = delay <= r.raw_s <= r.down_s + 2 * INTERVAL_S
            driver_ok = r.driver_delay_s <= PYMONGO_RECHECK_S + 2 * INTERVAL_S
            misses += (not raw_ok) + (not driver_ok)
            print(
                f"run {i + 1:2d}: down {r.down_s:.3f} s  raw {r.raw_s:.3f} s "
                f"(bound {r.down_s + 2 * INTERVAL_S:.3f}: {'PASS' if raw_ok else 'MISS'})  "
                f"pymongo {r.application_s:.3f} s  driver delay {r.driver_delay_s:.3f} s "
                f"({'PASS' if driver_ok else 'MISS'})  probes {r.ops_per_s:.0f} ops/s",
                flush=True,
            )
    over = [(r.raw_s - r.down_s) * 1000 for r in runs]
    delays = [r.driver_delay_s * 1000 for r in runs]
    print(
        f"raw - down: {min(over):+.0f} .. {max(over):+.0f} ms (target <= "
        f"{2 * INTERVAL_S * 1000:.0f}); driver delay {min(delays):.0f} .. {max(delays):.0f} ms, "
        f"median {statistics.median(delays):.0f} (target <= "
        f"{(PYMONGO_RECHECK_S + 2 * INTERVAL_S) * 1000:.0f}); {misses} misses"
    )


if __name__ == "__main__":
    main()
