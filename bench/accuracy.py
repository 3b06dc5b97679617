"""How close `rsdrill run`'s failover_s and write_unavailable_s come to the sandbox's ground truth.

Runs an rs3 primary host-kill experiment (built in code, probes at their defaults) N times through
`run_experiment`, and compares each run's metrics with the sandbox members' event logs: K = the
kill (`t0_monotonic + faults[0].injected_at_s`), W = the first "writable" event after K of a member
other than the killed one, M = that member's "majority_writable" event (its first entry of the
term majority-committed). failover_s's truth is W - K; write_unavailable_s's is M - K, because the
write probe writes with w:majority, which no primary can acknowledge before M. Prints a line per
run, then median and max |measured - truth| (raw_write_unavailable_s, rsdrill's own wire client's
gap, against M - K too) against the target (2 x the availability probe's
interval) and the probes' overhead in ops/s, in total and per probe.

Usage: python bench/accuracy.py [--runs 10] [--election-timeout 10s] [--keep-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from rsdrill.engine.options import RunOptions
from rsdrill.engine.runner import run_experiment
from rsdrill.experiment.probes import AvailabilityProbe
from rsdrill.experiment.schema import Experiment, format_duration, parse_duration
from rsdrill.sandbox.groundtruth import first_after


@dataclass(frozen=True)
class Run:
    killed: str
    new_primary: str
    truth_s: float
    failover_s: float
    write_unavailable_s: float
    raw_write_unavailable_s: float
    last_write_s: float | None
    """The end of the last successful write that ended before W, minus K (positive when that
    write was in flight at K and its acknowledgement arrived just after)."""
    first_write_s: float | None
    """The end of the first successful write that ended after W, minus W."""
    majority_writable_s: float | None
    """The new primary's "majority_writable" event (its first entry majority-committed) - W."""
    ops_per_s: float
    probe_ops_per_s: dict[str, float]


def experiment(election_timeout_s: float) -> Experiment:
    """Kill the primary 3 s in; restart it once a new primary must have been elected."""
    restart_after_s = 1.5 * election_timeout_s + 3
    return Experiment.model_validate(
        {
            "name": "accuracy-primary-kill",
            "target": {
                "platform": "sandbox",
                "topology": "rs3",
                "election_timeout": election_timeout_s,
            },
            "faults": [
                {
                    "at": "3s",
                    "kind": "host-kill",
                    "select": "primary",
                    "restart": {"after": restart_after_s},
                }
            ],
            "observe": {"after_revert": "30s"},
        }
    )


def measure(exp: Experiment, out_dir: Path) -> Run:
    """One run into `out_dir`, checked against its sandbox's event logs."""
    result = run_experiment(exp, RunOptions(out_dir=out_dir, live=False, journal_dir=out_dir))
    if result.verdict != "pass":
        raise RuntimeError(f"run {out_dir} ended {result.verdict}: {result.error}")
    fault = result.faults[0]
    assert result.clock is not None and fault.injected_at_s is not None
    t0 = result.clock.t0_monotonic
    kill = t0 + fault.injected_at_s
    writable = first_after(out_dir / "sandbox", "writable", kill, other_than=fault.target)
    if writable is None:
        raise RuntimeError(f"run {out_dir}: no other member became writable after the kill")
    if fault.reverted_at_s is not None and writable["t_mono"] > t0 + fault.reverted_at_s:
        raise RuntimeError(f"run {out_dir}: the killed member restarted before a failover")
    majority = first_after(
        out_dir / "sandbox", "majority_writable", kill, member=writable["member"]
    )
    m = result.metrics
    if (
        m.failover_s is None
        or m.write_unavailable_s is None
        or m.raw_write_unavailable_s is None
        or m.probe_ops_per_s is None
    ):
        raise RuntimeError(f"run {out_dir}: metrics missing: {m}")
    ops = [json.loads(line) for line in (out_dir / "history.jsonl").read_text().splitlines()]
    kill_s, writable_s = fault.injected_at_s, writable["t_mono"] - t0
    write_ends = [op["t_end"] for op in ops if op["probe"] == "write" and op["outcome"] == "ok"]
    before = [t for t in write_ends if t < writable_s]
    after = [t for t in write_ends if t > writable_s]
    counts = Counter(op["probe"] for op in ops)
    return Run(
        killed=fault.target,
        new_primary=writable["member"],
        truth_s=writable_s - kill_s,
        failover_s=m.failover_s,
        write_unavailable_s=m.write_unavailable_s,
        raw_write_unavailable_s=m.raw_write_unavailable_s,
        last_write_s=max(before) - kill_s if before else None,
        first_write_s=min(after) - writable_s if after else None,
        majority_writable_s=majority["t_mono"] - writable["t_mono"] if majority else None,
        ops_per_s=m.probe_ops_per_s,
        probe_ops_per_s={name: n / result.duration_s for name, n in counts.items()},
    )


def _ms(seconds: float | None) -> str:
    return " n/a" if seconds is None else f"{seconds * 1000:+.0f} ms"


def _errors(label: str, errors_s: list[float], target_ms: float | None) -> None:
    """Median and max |error|; PASS/MISS against `target_ms` unless it is None."""
    abs_ms = sorted(abs(e) * 1000 for e in errors_s)
    verdict = "" if target_ms is None else ("PASS" if abs_ms[-1] <= target_ms else "MISS")
    print(
        f"  {label:52s} |error| median {statistics.median(abs_ms):5.1f} ms  "
        f"max {abs_ms[-1]:5.1f} ms  (signed {min(errors_s) * 1000:+.0f} .. "
        f"{max(errors_s) * 1000:+.0f} ms)  {verdict}".rstrip()
    )


def report(runs: list[Run], interval_s: float) -> None:
    """failover_s is judged against kill -> writable; write_unavailable_s against kill ->
    majority_writable, because the write probe writes with w:majority, which no primary can
    acknowledge before its first entry of the term is majority-committed (MongoDB records that
    moment as wMajorityWriteAvailabilityDate)."""
    target_ms = 2 * interval_s * 1000
    print(
        f"\n{len(runs)} runs; target: max |measured - truth| <= {target_ms:.0f} ms "
        f"(2 x the availability interval, {interval_s * 1000:g} ms)"
    )
    _errors("failover_s vs kill -> writable", [r.failover_s - r.truth_s for r in runs], target_ms)
    majority = [(r, r.majority_writable_s) for r in runs if r.majority_writable_s is not None]
    _errors(
        "write_unavailable_s vs kill -> majority_writable",
        [r.write_unavailable_s - (r.truth_s + lag) for r, lag in majority],
        target_ms,
    )
    _errors(
        "raw_write_unavailable_s vs kill -> majority_writable",
        [r.raw_write_unavailable_s - (r.truth_s + lag) for r, lag in majority],
        target_ms,
    )
    print("  for comparison, not the target:")
    _errors(
        "write_unavailable_s vs kill -> writable",
        [r.write_unavailable_s - r.truth_s for r in runs],
        None,
    )
    lags_ms = sorted(lag * 1000 for _, lag in majority)
    print(
        f"  writable -> majority_writable: median {statistics.median(lags_ms):.0f} ms, "
        f"max {lags_ms[-1]:.0f} ms"
    )
    print(
        f"probe overhead: median {statistics.median(r.ops_per_s for r in runs):.0f} ops/s in "
        "total (result.metrics.probe_ops_per_s); per probe, median over runs:"
    )
    for name in sorted({p for r in runs for p in r.probe_ops_per_s}):
        rates = [r.probe_ops_per_s.get(name, 0.0) for r in runs]
        print(f"  {name:10s} {statistics.median(rates):6.1f} ops/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument(
        "--election-timeout", type=parse_duration, default=10.0, help="e.g. 10s (default), 1s"
    )
    parser.add_argument(
        "--keep-dir", type=Path, help="write each run's out dir here (default: a temp dir)"
    )
    args = parser.parse_args()
    exp = experiment(args.election_timeout)
    interval_s = AvailabilityProbe().interval
    print(
        f"rs3 primary host-kill, electionTimeout {format_duration(args.election_timeout)}, "
        f"{args.runs} runs; errors are measured - truth; K = the kill, W = new primary writable"
    )
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        base = args.keep_dir or Path(tmp)
        for i in range(args.runs):
            run = measure(exp, base / f"run-{i + 1:02d}")
            runs.append(run)
            print(
                f"run {i + 1:2d}: {run.killed} -> {run.new_primary}  truth {run.truth_s:6.3f}s  "
                f"failover_s {run.failover_s:6.3f}s ({_ms(run.failover_s - run.truth_s)})  "
                f"write_unavailable_s {run.write_unavailable_s:6.3f}s "
                f"({_ms(run.write_unavailable_s - run.truth_s)}; raw "
                f"{_ms(run.raw_write_unavailable_s - run.truth_s)}: last ok write "
                f"K{_ms(run.last_write_s)}, first W{_ms(run.first_write_s)}, "
                f"majority_writable W{_ms(run.majority_writable_s)})",
                flush=True,
            )
    report(runs, interval_s)


if __name__ == "__main__":
    main()
