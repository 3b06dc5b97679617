"""A run as the history holds it, and what its metrics are judged against (`rsdrill.store`
records and reads them; reports draw them)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Run:
    """One recorded run; `metrics` maps each scalar metric name to its value (None: unmeasured)."""

    id: int
    experiment: str
    started_at: dt.datetime
    verdict: str
    duration_s: float
    out_dir: Path
    metrics: dict[str, float | None]
    cluster: str = ""  # "" for runs recorded before clusters were


def cluster_name(
    named: str | None,
    platform: str,
    topology: str,
    set_name: str | None,
    members: list[str],
    *,
    built: bool,
) -> str:
    """The cluster a run ran against, as the history and the fleet view group runs: the name
    the experiment gives it, else `<platform>/<topology>` for a cluster the run builds (anew
    each time, on ports of its own: the sandbox), else the set's name and its members as
    found."""
    if named:
        return named
    if built:
        return f"{platform}/{topology}"
    seeds = ",".join(sorted(members))
    return f"{set_name}@{seeds}" if set_name else seeds


@dataclass(frozen=True)
class Baseline:
    """What a run's metric is judged against: the `size` previous values' median and MAD, and
    `threshold` = median + k * max(1.4826 * MAD, floor)."""

    median: float
    mad: float
    threshold: float
    size: int


@dataclass(frozen=True)
class Regression:
    """`run`'s `metric` was `value`, above its `baseline`'s threshold."""

    run: Run
    metric: str
    value: float
    baseline: Baseline
