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
