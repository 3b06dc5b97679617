"""`rsdrill soak` throughput and search: runs per hour on the sandbox, and (with --broken) the
time to find the test-only broken server (w:majority acknowledged before replication) and the
size it is shrunk to.

Usage: python bench/soak_rate.py [--minutes 10] [--broken] [--file experiments/soak-rs3.yaml]
       [--port-range 31000-32999] [--seed 1]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from rsdrill.engine.soak import soak
from rsdrill.experiment.loader import load_experiment
from rsdrill.sandbox.config import UNSAFE_MAJORITY_ACK_ENV

ROOT = Path(__file__).resolve().parents[1]
TARGET_RUNS_PER_HOUR = 200


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--broken", action="store_true", help="the test-only broken sandbox")
    parser.add_argument("--file", type=Path, default=ROOT / "experiments" / "soak-rs3.yaml")
    parser.add_argument("--port-range", default=os.environ.get("RSDRILL_PORT_RANGE", ""))
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if args.port_range:
        os.environ["RSDRILL_PORT_RANGE"] = args.port_range
    if args.broken:
        os.environ[UNSAFE_MAJORITY_ACK_ENV] = "1"
    else:
        os.environ.pop(UNSAFE_MAJORITY_ACK_ENV, None)
    experiment = load_experiment(args.file)
    load_before = os.getloadavg()[0]
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        report = soak(experiment, Path(tmp), duration_s=args.minutes * 60, seed=args.seed,
                      progress=lambda line: print(line, flush=True))  # fmt: skip
        total_s = time.monotonic() - started
    errors = sum(r.verdict in ("error", "aborted") for r in report.runs)
    run_s = sorted(r.seconds for r in report.runs)
    kind = "broken" if args.broken else "correct"
    print(f"\n{args.file.name}, {kind} sandbox, seed {args.seed}, "
          f"load average {load_before:.1f} → {os.getloadavg()[0]:.1f}")  # fmt: skip
    print(f"runs: {len(report.runs)} in {report.elapsed_s:.0f}s, {errors} ended in an error; "
          f"run median {run_s[len(run_s) // 2]:.1f}s (max {run_s[-1]:.1f}s)")  # fmt: skip
    rate = report.runs_per_hour
    verdict = "PASS" if rate >= TARGET_RUNS_PER_HOUR else "FAIL"
    print(f"runs/hour: {rate:.0f} (target >= {TARGET_RUNS_PER_HOUR}): {verdict}")
    if report.violating is None:
        print("violations: none")
        return
    names = ", ".join(v.invariant for v in report.violating.violations)
    shrunk = report.shrunk or []
    print(f"violation ({names}) found after {report.found_after_s:.0f}s, run "
          f"{report.violating.index}; shrunk to {len(shrunk)} fault(s) in "
          f"{report.shrink_runs} runs ({total_s - (report.found_after_s or 0):.0f}s): "
          + "; ".join(f"{f.kind} at {f.at:g}s for {f.duration}s" for f in shrunk))  # fmt: skip


if __name__ == "__main__":
    main()
