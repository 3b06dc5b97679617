"""Hand-made results for the history's tests: nightly runs of one set, and a small fleet."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from rsdrill import store
from rsdrill.result import EXIT_CODES, Latency, Metrics, Result, TargetInfo

T0 = dt.datetime(2024, 5, 1, 2, 0, tzinfo=dt.UTC)
# Nightly write gaps of a healthy set: a spread of a few hundred milliseconds around 11 s.
NOISE = [0.12, -0.08, 0.30, -0.21, 0.05, 0.18, -0.15, 0.02, -0.27, 0.22,
         -0.04, 0.11, -0.19, 0.26, -0.10, 0.07, -0.23, 0.15, -0.02, 0.09]  # fmt: skip
OUTLIER_AT = 14


def make_result(
    day: int,
    write_unavailable_s: float | None = 11.0,
    *,
    experiment: str = "rs3-primary-kill",
    verdict: str = "pass",
    lost: int = 0,
) -> Result:
    """A run on the night of T0 + `day`."""
    return Result(
        experiment=experiment,
        verdict=verdict,
        exit_code=EXIT_CODES[verdict],
        started_at=(T0 + dt.timedelta(days=day)).isoformat(),
        duration_s=41.5,
        target=TargetInfo(platform="sandbox", topology="rs3", uri="mongodb://127.0.0.1:28017"),
        metrics=Metrics(
            write_unavailable_s=write_unavailable_s,
            failover_s=None if write_unavailable_s is None else write_unavailable_s - 0.02,
            recovery_s={"127.0.0.1:28017": 0.84 + day % 3 * 0.05},
            acknowledged_writes=2000 + day,
            lost_acknowledged_writes=lost,
            latency_ms=Latency(p50=2.0, p95=4.0, p99=6.0 + day % 4 * 0.2, max=30.0),
        ),
    )


def on(cluster: str, result: Result) -> Result:
    result.target.cluster = cluster
    return result


def fleet_history(tmp_path: Path, db: Path) -> None:
    """Three clusters of nightly runs: east-1 steady at 11 s, west-2 steady at 25 s (a slower
    set, not a regression) with one night at 40 s as its newest run, and one failing run on an
    unnamed cluster."""
    results = [on("east-1", make_result(d, 11.0 + n)) for d, n in enumerate(NOISE)]
    results += [on("west-2", make_result(d, 25.0 + n)) for d, n in enumerate(NOISE[:OUTLIER_AT])]
    results.append(on("west-2", make_result(OUTLIER_AT, 40.0)))
    results.append(make_result(3, 11.0, experiment="rs1-host-kill", verdict="fail"))
    for i, result in enumerate(results):
        store.record(result, tmp_path / f"run-{i}", db)
