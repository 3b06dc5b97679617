"""A stepdown onto a cold secondary under an IOPS cap: how long reads stay degraded, by
working-set size and by cap, beside a warm secondary (issue 21, Parse's cold secondary).

Runs `experiments/seeds/parse-cold-secondary.yaml` (psa, page cache 32 MB per member, workload C:
reads only, of `records` uniform keys of 1000 B, the secondary restarted on its kept data at
2 s so its cache starts empty, its volume capped at `read_iops` from 7 s, stepdown at 12 s)
with three working-set sizes at one cap, three caps at one size, and the warm control: the
same without the restart (the secondary wrote every record while replicating the preload),
run --warm-runs times to show the floor.

The degraded period: the warm baseline is the median of the load's reads that ended in the 5 s
before the stepdown (served by the warm old primary); the clock starts when the failover
probe's hello stream shows the heir writable (printed: stepdown → writable, the hand-over, the
same warm or cold); from there, over the heir's reads that started from then on (reads queued
through the hand-over are left out), 1 s windows every 0.25 s, and the period ends at the first
window whose median is within 1.5x the baseline, at least the baseline + 10 ms
(`rsdrill.analysis.latency.takeover`). Also
printed: the p99 of the heir's first second as primary and the read calls its cap slowed (the
cache's misses: with nothing written, no checkpoint reads the journal back).

Usage: python bench/cold_cache.py [--sizes-mb 2,4,8] [--caps 25,50,100] [--size-mb 4]
       [--cap 50] (root: the members run on faultfs)
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rsdrill.analysis.latency import (
    TAKEOVER_BASELINE_S,
    TAKEOVER_SLACK_S,
    TOLERANCE,
    percentile,
    takeover,
)
from rsdrill.engine.options import RunOptions
from rsdrill.engine.runner import run_experiment
from rsdrill.experiment.loader import load_experiment_text
from rsdrill.history import Op

EXPERIMENT = (
    Path(__file__).resolve().parents[1] / "experiments" / "seeds" / "parse-cold-secondary.yaml"
)
RECORD_BYTES = 1000


@dataclass(frozen=True)
class Point:
    size_mb: float
    cap: int
    cold: bool
    baseline_ms: float
    writable_s: float
    degraded_s: float
    first_second_p99_ms: float
    slowed_reads: int


def variant(size_mb: float, cap: int, *, cold: bool) -> dict[str, Any]:
    """The experiment file with this working set and cap; warm: without the restart."""
    spec: dict[str, Any] = yaml.safe_load(EXPERIMENT.read_text())
    spec["probes"]["load"]["records"] = math.ceil(size_mb * 1e6 / RECORD_BYTES)
    spec["probes"]["load"]["record_bytes"] = RECORD_BYTES
    spec["slo"] = {}  # the bench judges by its own figures
    faults = []
    for fault in spec["faults"]:
        if fault["kind"] == "host-kill" and not cold:
            continue
        if fault["kind"] == "iops-throttle":
            fault["read_iops"] = cap
        faults.append(fault)
    spec["faults"] = faults
    return spec


def _ops(out_dir: Path) -> list[Op]:
    with (out_dir / "history.jsonl").open() as lines:
        return [Op(**json.loads(line)) for line in lines]


def measure(out_dir: Path, label: str, size_mb: float, cap: int, *, cold: bool) -> Point:
    text = yaml.safe_dump(variant(size_mb, cap, cold=cold))
    result = run_experiment(
        load_experiment_text(text, f"{label}.yaml"),
        RunOptions(out_dir=out_dir, live=False, journal_dir=out_dir),
    )
    if result.verdict == "error":
        raise RuntimeError(f"{label}: the run failed: {result.error}")
    stepdown = next(f for f in result.faults if f.kind == "stepdown")
    throttle = next(f for f in result.faults if f.kind == "iops-throttle")
    if stepdown.injected_at_s is None:
        raise RuntimeError(f"{label}: the stepdown was not injected")
    ops = _ops(out_dir)
    taken = takeover(ops, stepdown.injected_at_s, throttle.target)
    if taken is None:
        raise RuntimeError(f"{label}: no baseline, or the heir {throttle.target} never writable")
    start = stepdown.injected_at_s + taken.writable_s
    first = sorted(
        op.t_end - op.t_start
        for op in ops
        if op.probe == "load" and op.op == "read" and op.ok and op.member == throttle.target
        and op.t_start >= start and op.t_end < start + 1.0
    )  # fmt: skip
    return Point(
        size_mb=size_mb,
        cap=cap,
        cold=cold,
        baseline_ms=taken.baseline_s * 1000,
        writable_s=taken.writable_s,
        degraded_s=taken.degraded_s,
        first_second_p99_ms=percentile(first, 99) * 1000 if first else math.nan,
        slowed_reads=int(throttle.detail.get("operations", {}).get("slowed", 0)),
    )


def _row(p: Point, label: str) -> str:
    return (f"{label:<13} {p.size_mb:>5g} MB {p.cap:>4} IOPS {'cold' if p.cold else 'warm'}  "
            f"baseline p50 {p.baseline_ms:5.1f} ms  writable after {p.writable_s:4.2f} s  "
            f"first-second p99 {p.first_second_p99_ms:6.1f} ms  degraded {p.degraded_s:5.2f} s  "
            f"reads slowed by the cap {p.slowed_reads}")  # fmt: skip


def _monotone(values: list[float], *, rising: bool) -> bool:
    pairs = list(itertools.pairwise(values))
    return all(b > a for a, b in pairs) if rising else all(b < a for a, b in pairs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mb", default="2,4,8", help="working sets at --cap")
    parser.add_argument("--caps", default="25,50,100", help="read IOPS caps at --size-mb")
    parser.add_argument("--size-mb", type=float, default=4.0)
    parser.add_argument("--cap", type=int, default=50)
    parser.add_argument(
        "--warm-runs", type=int, default=3, help="warm controls at --size-mb, --cap"
    )
    args = parser.parse_args()
    sizes = [float(s) for s in args.sizes_mb.split(",")]
    caps = [int(c) for c in args.caps.split(",")]
    plan = [(f"size {s:g} MB", s, args.cap, True) for s in sizes]
    plan += [(f"cap {c}", args.size_mb, c, True) for c in caps]
    plan += [(f"warm {i + 1}", args.size_mb, args.cap, False) for i in range(args.warm_runs)]
    print(f"definition: degraded = from the heir's first writable hello until the first 1 s "
          f"window of its reads (started from then on) with a median <= {TOLERANCE}x the warm "
          f"baseline (median of the {TAKEOVER_BASELINE_S:g} s before the stepdown; at least "
          f"the baseline + {TAKEOVER_SLACK_S * 1000:g} ms)",
          flush=True)  # fmt: skip
    points: dict[tuple[float, int, bool], Point] = {}
    warm: list[float] = []
    with tempfile.TemporaryDirectory(prefix="rsdrill-bench-cold-") as tmp:
        for i, (label, size, cap, cold) in enumerate(plan):
            key = (size, cap, cold)
            if key not in points or not cold:  # the size and cap series share a cold point
                points[key] = measure(Path(tmp) / f"run-{i}", label, size, cap, cold=cold)
            print(_row(points[key], label), flush=True)
            if not cold:
                warm.append(points[key].degraded_s)
    by_size = [points[(s, args.cap, True)].degraded_s for s in sizes]
    by_cap = [points[(args.size_mb, c, True)].degraded_s for c in caps]
    print(
        f"degraded by size at {args.cap} IOPS: {', '.join(f'{d:.2f}' for d in by_size)} s: "
        f"{'PASS' if _monotone(by_size, rising=True) else 'FAIL'} (grows with the working set)"
    )
    print(
        f"degraded by cap at {args.size_mb:g} MB: {', '.join(f'{d:.2f}' for d in by_cap)} s: "
        f"{'PASS' if _monotone(by_cap, rising=False) else 'FAIL'} (shrinks as the cap rises)"
    )
    print(
        f"warm controls degraded {', '.join(f'{d:.2f}' for d in warm)} s: "
        f"{'PASS' if all(d == 0 for d in warm) else 'FAIL'} (none)"
    )


if __name__ == "__main__":
    main()
