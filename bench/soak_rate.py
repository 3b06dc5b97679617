"""`rsdrill soak` throughput and search: runs per hour on the sandbox, and (with --planted) the
time and runs to find a deliberately broken server and the size its schedule is shrunk to.

Planted: majority-ack (w:majority acknowledged before replication), skip-oplog (each member
leaves the 30th insert it applies as a secondary out of its data), snapshot (transactions read
past their snapshot), after-cluster-time (reads do not wait for their causal session),
no-rollback-files (a rollback keeps no file: with a w:1 j:true ledger, an unaccounted loss).

Usage: python bench/soak_rate.py [--minutes M] [--runs N] [--planted NAME] [--w1-ledger]
       [--keep DIR] [--file experiments/soak-rs3.yaml] [--port-range 31000-32999] [--seed 1]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from rsdrill.engine.soak import soak
from rsdrill.experiment.loader import load_experiment
from rsdrill.experiment.probes import DurabilityProbe
from rsdrill.sandbox.config import (
    IGNORE_AFTER_CLUSTER_TIME_ENV,
    NO_ROLLBACK_FILES_ENV,
    PLANTED_ENVS,
    SKIP_OPLOG_ENTRY_ENV,
    UNSAFE_MAJORITY_ACK_ENV,
    UNSAFE_SNAPSHOT_ENV,
)

ROOT = Path(__file__).resolve().parents[1]
TARGET_RUNS_PER_HOUR = 200
PLANTED = {
    "majority-ack": (UNSAFE_MAJORITY_ACK_ENV, "1"),
    "skip-oplog": (SKIP_OPLOG_ENTRY_ENV, "30"),
    "snapshot": (UNSAFE_SNAPSHOT_ENV, "1"),
    "after-cluster-time": (IGNORE_AFTER_CLUSTER_TIME_ENV, "1"),
    "no-rollback-files": (NO_ROLLBACK_FILES_ENV, "1"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--minutes",
        type=float,
        default=None,
        help="stop after this long (default: 10, or none with --runs)",
    )
    parser.add_argument("--runs", type=int, default=None, help="stop after this many runs")
    parser.add_argument("--planted", choices=sorted(PLANTED), help="a test-only broken sandbox")
    parser.add_argument(
        "--w1-ledger",
        action="store_true",
        help="a w:1 j:true ledger (unaccounted-loss: --planted no-rollback-files)",
    )
    parser.add_argument(
        "--keep",
        type=Path,
        default=None,
        help="the soak's directory (kept: the violating run and shrunk.yaml)",
    )
    parser.add_argument("--file", type=Path, default=ROOT / "experiments" / "soak-rs3.yaml")
    parser.add_argument("--port-range", default=os.environ.get("RSDRILL_PORT_RANGE", ""))
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    # --runs alone means that many runs, however long they take (a silent 10-minute cap once
    # ended a 200-run soak at run 62).
    minutes = args.minutes if args.minutes is not None else (float("inf") if args.runs else 10.0)
    if args.port_range:
        os.environ["RSDRILL_PORT_RANGE"] = args.port_range
    for name in PLANTED_ENVS:
        os.environ.pop(name, None)
    if args.planted:
        env, value = PLANTED[args.planted]
        os.environ[env] = value
    experiment = load_experiment(args.file)
    if args.w1_ledger:
        ledger = DurabilityProbe(write_concern=1, journal=True, share_writes=False)
        probes = experiment.probes.model_copy(update={"durability": ledger})
        experiment = experiment.model_copy(update={"probes": probes})
    load_before = os.getloadavg()[0]
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        # --keep: the violating run's history, result and shrunk schedule outlive the bench.
        where = args.keep or Path(tmp)
        report = soak(experiment, where, duration_s=minutes * 60, seed=args.seed,
                      max_runs=args.runs,
                      progress=lambda line: print(line, flush=True))  # fmt: skip
        total_s = time.monotonic() - started
    errors = sum(r.verdict in ("error", "aborted") for r in report.runs)
    run_s = sorted(r.seconds for r in report.runs)
    kind = f"planted {args.planted}" if args.planted else "correct"
    print(f"\n{args.file.name}, {kind} sandbox, seed {args.seed}, "
          f"load average {load_before:.1f} → {os.getloadavg()[0]:.1f}")  # fmt: skip
    print(f"runs: {len(report.runs)} in {report.elapsed_s:.0f}s, {errors} ended in an error; "
          f"run median {run_s[len(run_s) // 2]:.1f}s (max {run_s[-1]:.1f}s)")  # fmt: skip
    rate = report.runs_per_hour
    verdict = "PASS" if rate >= TARGET_RUNS_PER_HOUR else "FAIL"
    print(f"runs/hour: {rate:.0f} (target >= {TARGET_RUNS_PER_HOUR}): {verdict}")
    if report.stopped_by is not None:
        print(f"stopped by {report.stopped_by}")
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
