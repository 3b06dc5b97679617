"""Latency: percentiles of successful operations, and how long they stayed degraded after a fault.

The source is the load probe's successful ops when there are any, else the availability
probes' ("write" and "read"); an op's latency is `t_end - t_start`. Percentiles are
nearest-rank: the smallest value such that at least p % of the values are at or below it (so
every percentile is a latency that was actually observed).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rsdrill.history import FaultRecord, Op, column_parts, columns, of_probes
from rsdrill.opcolumns import TIMES, OpColumns
from rsdrill.result import Latency

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

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
HORIZON_S = 60.0
"""`degradation_s` reads the ops after the revert this far first, then eight times as far each
time: latency is usually back within seconds, and a day's run is not read at once for that."""
READS = ("read", "find")
"""The reads among `latency_source`'s ops: the load's and the availability probe's."""


def percentile(values: Sequence[float] | NDArray[np.float64], p: float) -> float:
    """Nearest-rank percentile `p` (0 < p <= 100) of `values`, which must be sorted, non-empty."""
    return float(values[max(1, math.ceil(p * len(values) / 100)) - 1])


def latency_source(ops: Sequence[Op], fields: Collection[str] = TIMES) -> OpColumns:
    """The successful ops latency is measured on: "load" if any, else "write" and "read"
    (the columns `fields`, in no particular order)."""
    source = columns(ops, *_source_probes(ops), fields=fields, ordered=False)
    return source.where(source.ok)


def _source_probes(ops: Sequence[Op]) -> tuple[str, ...]:
    """The probes `latency_source` takes: "load" if it has a successful op."""
    loads = column_parts(ops, "load", fields=("outcome",))
    return ("load",) if any(part.ok.any() for part in loads) else ("write", "read")


def _latencies(ops: Sequence[Op], ended: tuple[float, float] | None = None
               ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:  # fmt: skip
    """The ends and latencies (s) of `latency_source(ops)`, sorted by end; those that ended
    in `ended` only, if given. Read a part at a time: 16 bytes an op are held, not the ops."""
    import numpy as np

    ends, latencies = [], []
    for part in column_parts(ops, *_source_probes(ops), fields=TIMES, ended=ended):
        ok = part.ok
        ends.append(part.t_end[ok])
        latencies.append((part.t_end - part.t_start)[ok])
    end, latency = np.concatenate([np.empty(0), *ends]), np.concatenate([np.empty(0), *latencies])
    order = np.argsort(end, kind="stable")
    return end[order], latency[order]


def latency_ms(ops: Sequence[Op]) -> Latency:
    """`latency_ms`: p50, p95, p99 and max in milliseconds over `latency_source(ops)`.

    All fields None when there is no successful op.
    """
    import numpy as np

    probes = _source_probes(ops)
    # Counted first, then filled: one array of the latencies, never two.
    size = sum(int(p.ok.sum()) for p in column_parts(ops, *probes, fields=("outcome",)))
    values, at = np.empty(size), 0
    for p in column_parts(ops, *probes, fields=TIMES):
        latencies = (p.t_end - p.t_start)[p.ok] * 1000
        values[at : at + len(latencies)] = latencies
        at += len(latencies)
    values.sort()
    if not len(values):
        return Latency()
    return Latency(
        p50=percentile(values, 50),
        p95=percentile(values, 95),
        p99=percentile(values, 99),
        max=float(values[-1]),
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
    _, baseline = _latencies(ops, ended=(-math.inf, min(injections)))
    baseline.sort()
    if len(baseline) < BASELINE_MIN_OPS:
        return None
    limit = TOLERANCE * percentile(baseline, 99)
    reverts = [f.reverted_at_s for f in faults if f.reverted_at_s is not None]
    since = max(reverts) if reverts else max(injections)
    last_end = max((float(p.t_end[p.ok].max()) for p in column_parts(
        ops, *_source_probes(ops), fields=TIMES) if p.ok.any()), default=None)  # fmt: skip
    if last_end is None:
        return 0.0
    horizon = HORIZON_S
    while True:
        ends, latencies = _latencies(ops, ended=(since, since + horizon + WINDOW_S))
        found = _first_normal(ends, latencies, since, limit, 99, min(last_end, since + horizon))
        if found is not None:
            return found
        if since + horizon >= last_end:
            return max(0.0, last_end - since)
        horizon *= 8


def back_to_normal_s(
    ends: NDArray[np.float64],
    latencies: NDArray[np.float64],
    since: float,
    limit_s: float,
    p: float = 99,
) -> float:
    """How long after `since` latency stayed above `limit_s` (percentile `p` of sliding
    windows).

    Successful ops as their `ends` (sorted) and `latencies`, in seconds. Windows of 1 s start
    at `since` and every 0.25 s after it; an op belongs to the window its end falls in (start
    inclusive, end exclusive). The result is the offset of the first window with at least 5
    ops whose percentile `p` is at most `limit_s`, or, if none qualifies, the time from `since`
    to the last op's end (0 when no op ended after it).
    """
    if not len(ends):
        return 0.0
    last_end = float(ends[-1])
    found = _first_normal(ends, latencies, since, limit_s, p, last_end)
    return max(0.0, last_end - since) if found is None else found


def _first_normal(ends: NDArray[np.float64], latencies: NDArray[np.float64], since: float,
                  limit_s: float, p: float, last_start: float) -> float | None:  # fmt: skip
    """`back_to_normal_s`'s first window back to normal among those starting at `last_start`
    or before; None if none is. `ends` must hold every op that ended in those windows."""
    import numpy as np

    steps = np.arange(max(0, int((last_start - since) / STEP_S) + 2))
    starts = since + steps * STEP_S
    steps, starts = steps[starts <= last_start], starts[starts <= last_start]
    lows = np.searchsorted(ends, starts, side="left")
    highs = np.searchsorted(ends, starts + WINDOW_S, side="left")
    for step, low, high in zip(steps.tolist(), lows.tolist(), highs.tolist(), strict=True):
        if high - low >= WINDOW_MIN_OPS and (
            percentile(np.sort(latencies[low:high]), p) <= limit_s
        ):
            return step * STEP_S
    return None


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
    import numpy as np

    source = latency_source(ops, fields=(*TIMES, "op", "member"))
    reads = source.where(source.named("op", READS))
    reads = reads.where(np.argsort(reads.t_end, kind="stable"))
    latencies = reads.t_end - reads.t_start
    before = np.sort(latencies[(at - TAKEOVER_BASELINE_S <= reads.t_end) & (reads.t_end < at)])
    writable = [
        op.t_end
        for op in of_probes(ops, "failover")
        if op.member == member and op.ok and op.t_end > at and op.detail.get("writable")
    ]
    if len(before) < BASELINE_MIN_OPS or not writable:
        return None
    baseline = percentile(before, 50)
    start = min(writable)
    served = (reads.member == reads.code("member", member)) & (reads.t_start >= start)
    limit = max(TOLERANCE * baseline, baseline + TAKEOVER_SLACK_S)
    return Takeover(
        baseline_s=baseline,
        writable_s=start - at,
        degraded_s=back_to_normal_s(reads.t_end[served], latencies[served], start, limit, p=50),
    )
