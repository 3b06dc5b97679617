"""Latency: percentiles of successful operations, and how long they stayed degraded after a fault.

The source is the load probe's successful ops when there are any, else the availability
probes' ("write" and "read"); an op's latency is `t_end - t_start`. Percentiles are
nearest-rank: the smallest value such that at least p % of the values are at or below it (so
every percentile is a latency that was actually observed).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass

from rsdrill.history import FaultRecord, Op, of_probes
from rsdrill.result import Latency

BASELINE_MIN_OPS = 20
"""Fewer successful ops before the first fault give no baseline (degradation_s is None)."""
WINDOW_S = 1.0
STEP_S = 0.25
WINDOW_MIN_OPS = 5
TOLERANCE = 1.5
"""A window is back to normal when its p99 is at most this times the baseline p99."""
TAKEOVER_BASELINE_S = 5.0
"""`takeover`'s baseline: the reads that ended this long before the hand-over."""
TAKEOVER_SLACK_S = 0.010
"""`takeover`: a read this close to the baseline is not degraded, however small the baseline
(a few milliseconds are a busy machine's scheduling, not a cache; one read through a volume
capped at 50 IOPS takes 20)."""
READS = ("read", "find")
"""The reads among `latency_source`'s ops: the load's and the availability probe's."""


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile `p` (0 < p <= 100) of `values`, which must be sorted, non-empty."""
    return values[max(1, math.ceil(p * len(values) / 100)) - 1]


def latency_source(ops: Sequence[Op]) -> list[Op]:
    """The successful ops latency is measured on: "load" if any, else "write" and "read"."""
    load = [op for op in of_probes(ops, "load") if op.ok]
    return load or [op for op in of_probes(ops, "write", "read") if op.ok]


def latency_ms(ops: Sequence[Op]) -> Latency:
    """`latency_ms`: p50, p95, p99 and max in milliseconds over `latency_source(ops)`.

    All fields None when there is no successful op.
    """
    values = sorted((op.t_end - op.t_start) * 1000 for op in latency_source(ops))
    if not values:
        return Latency()
    return Latency(
        p50=percentile(values, 50),
        p95=percentile(values, 95),
        p99=percentile(values, 99),
        max=values[-1],
    )


def degradation_s(ops: Sequence[Op], faults: Sequence[FaultRecord]) -> float | None:
    """`degradation_s`: how long after the faults latency stayed above normal.

    Baseline: p99 of `latency_source(ops)` ending before the first injection; None with fewer
    than 20 such ops (or no injected fault). Then `back_to_normal_s` from the last revert (the
    last injection when nothing was reverted) with a limit of 1.5 times the baseline (0 when
    latency was already normal).
    """
    injections = [f.injected_at_s for f in faults if f.injected_at_s is not None]
    if not injections:
        return None
    source = sorted(latency_source(ops), key=lambda o: o.t_end)
    first_injection = min(injections)
    baseline_values = sorted(op.t_end - op.t_start for op in source if op.t_end < first_injection)
    if len(baseline_values) < BASELINE_MIN_OPS:
        return None
    limit = TOLERANCE * percentile(baseline_values, 99)
    reverts = [f.reverted_at_s for f in faults if f.reverted_at_s is not None]
    since = max(reverts) if reverts else max(injections)
    return back_to_normal_s(source, since, limit)


def back_to_normal_s(source: Sequence[Op], since: float, limit_s: float, p: float = 99) -> float:
    """How long after `since` latency stayed above `limit_s` (percentile `p` of sliding
    windows).

    `source`: successful ops sorted by `t_end`. Windows of 1 s start at `since` and every
    0.25 s after it; an op belongs to the window its `t_end` falls in (start inclusive, end
    exclusive). The result is the offset of the first window with at least 5 ops whose
    percentile `p` is at most `limit_s`, or, if none qualifies, the time from `since` to the
    last op's `t_end` (0 when no op ended after it).
    """
    ends = [op.t_end for op in source]
    if not ends:
        return 0.0
    last_end = ends[-1]
    step = 0
    while since + step * STEP_S <= last_end:
        start = since + step * STEP_S
        window = source[bisect_left(ends, start) : bisect_left(ends, start + WINDOW_S)]
        if len(window) >= WINDOW_MIN_OPS and (
            percentile(sorted(op.t_end - op.t_start for op in window), p) <= limit_s
        ):
            return step * STEP_S
        step += 1
    return max(0.0, last_end - since)


@dataclass(frozen=True)
class Takeover:
    """How a member that took over the reads (a stepdown's heir) served them; see `takeover`."""

    baseline_s: float
    """The median of the reads that ended in the 5 s before the hand-over."""
    writable_s: float
    """From the hand-over to the member's first hello answer saying it is writable."""
    degraded_s: float
    """From then until the member's typical read was back within 1.5 times the baseline."""


def takeover(ops: Sequence[Op], at: float, member: str) -> Takeover | None:
    """How long `member`'s reads stayed slower than the set's before `at` (e.g. a stepdown onto
    a member whose cache is cold).

    Reads: the successful reads of `latency_source(ops)`. Baseline: the median of those that
    ended in the 5 s before `at`. The clock starts when the failover probe's hello stream first
    showed `member` writable after `at`; reads that started before (queued through the
    hand-over, warm heir or cold) are left out, and `back_to_normal_s` runs over `member`'s
    reads that started from then on, on the windows' medians, limit 1.5 times the baseline (at
    least the baseline plus TAKEOVER_SLACK_S). Medians, not p99s: a cold heir slows its typical
    read, while a busy machine slows a few reads of any member, warm or cold, and before the
    hand-over too (CI: a 5 ms p99 baseline made a warm heir 'degraded' 1.5 s; a 111 ms one hid
    a cold heir's 160 ms reads). None with fewer than 20 baseline reads or no writable answer
    of `member`.
    """
    reads = sorted((op for op in latency_source(ops) if op.op in READS), key=lambda o: o.t_end)
    before = sorted(
        op.t_end - op.t_start for op in reads if at - TAKEOVER_BASELINE_S <= op.t_end < at
    )
    writable = [
        op.t_end
        for op in of_probes(ops, "failover")
        if op.member == member and op.ok and op.t_end > at
        and op.detail.get("writable")
    ]  # fmt: skip
    if len(before) < BASELINE_MIN_OPS or not writable:
        return None
    baseline = percentile(before, 50)
    start = min(writable)
    served = [op for op in reads if op.member == member and op.t_start >= start]
    limit = max(TOLERANCE * baseline, baseline + TAKEOVER_SLACK_S)
    return Takeover(
        baseline_s=baseline,
        writable_s=start - at,
        degraded_s=back_to_normal_s(served, start, limit, p=50),
    )
