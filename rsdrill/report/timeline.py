"""The timeline chart's data: a history of any length reduced to what a 1200-pixel chart can show.

A run of 10 minutes at 20 ms per probe, plus a load generator, is hundreds of thousands of
attempts; the chart needs runs of equal outcome, a latency curve and state segments. Everything
here is bounded by constants below, never by the history's length, so report.html stays small.
Times are seconds since run start, rounded to the millisecond.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from rsdrill.history import Op, last_end, of_probes
from rsdrill.result import Result

# Availability strips, top to bottom. Failover/recovery/lag probes are drawn as state lanes and
# the lag panel instead: their attempts poll members, they are not client traffic.
STRIP_PROBES = ("write", "raw_write", "read", "ledger", "load")
LATENCY_PROBES = ("write", "read", "load")
# Index = severity: when outcomes must be merged, the worse one is drawn.
OUTCOMES = ("ok", "timeout", "error")
MAX_RUNS = 1500  # per strip; above this, runs are merged into time buckets
BUCKETS = 500  # latency and lag points per series


def _r(t: float) -> float:
    return round(t, 3)


def _severity(op: Op) -> int:
    # An outcome the reports do not know is shown as the worst, not hidden as ok.
    return OUTCOMES.index(op.outcome) if op.outcome in OUTCOMES else len(OUTCOMES) - 1


def outcome_runs(ops: Sequence[Op]) -> list[list[float | int]]:
    """Runs of one strip as [t0, t1, outcome index, attempts, attempts not ok].

    Consecutive attempts (by start time) with the same outcome form one run, from the first's
    start to the latest end; beyond `MAX_RUNS` runs (flapping, many load threads) they are merged
    into time buckets drawn with their worst outcome.
    """
    ordered = sorted(ops, key=lambda op: op.t_start)
    runs: list[list[float | int]] = []
    for op in ordered:
        severity = _severity(op)
        bad = int(severity > 0)
        if runs and runs[-1][2] == severity:
            run = runs[-1]
            run[1] = max(run[1], op.t_end)
            run[3] += 1
            run[4] += bad
        else:
            runs.append([op.t_start, op.t_end, severity, 1, bad])
    if len(runs) > MAX_RUNS:
        runs = _bucketed_runs(ordered)
    return [[_r(t0), _r(t1), *rest] for t0, t1, *rest in runs]


def _bucketed_runs(ordered: Sequence[Op]) -> list[list[float | int]]:
    first = ordered[0].t_start
    last = max(op.t_end for op in ordered)
    width = max(last - first, 1e-3) / MAX_RUNS
    severity = [-1] * MAX_RUNS
    count = [0] * MAX_RUNS
    bad = [0] * MAX_RUNS

    def index(t: float) -> int:
        return min(MAX_RUNS - 1, int((t - first) / width))

    for op in ordered:
        start = index(op.t_start)
        op_severity = _severity(op)
        count[start] += 1
        bad[start] += int(op_severity > 0)
        # A failed attempt colors all the time it spent failing (a 10 s timeout is 10 s amber);
        # an ok one only its start, so a slow success does not paint over its neighbours.
        end = index(op.t_end) if op_severity else start
        for b in range(start, end + 1):
            severity[b] = max(severity[b], op_severity)

    runs: list[list[float | int]] = []
    for b in range(MAX_RUNS):
        # An empty bucket is the pause between two attempts: it continues the current run.
        if severity[b] < 0 or (runs and runs[-1][2] == severity[b]):
            if runs:
                runs[-1][1] = first + (b + 1) * width
                runs[-1][3] += count[b]
                runs[-1][4] += bad[b]
            continue
        runs.append([first + b * width, first + (b + 1) * width, severity[b], count[b], bad[b]])
    return runs


def _bucket_index(t: float, end: float) -> int:
    return min(BUCKETS - 1, max(0, int(t / end * BUCKETS)))


def latency_series(ops: Iterable[Op], end: float) -> list[list[float | int]]:
    """Successful attempts' latency per time bucket: [bucket middle s, p50 ms, max ms, attempts]."""
    buckets: dict[int, list[float]] = defaultdict(list)
    for op in ops:
        if op.ok:
            buckets[_bucket_index(op.t_start, end)].append((op.t_end - op.t_start) * 1000)
    width = end / BUCKETS
    return [
        [_r((b + 0.5) * width), round(statistics.median(v), 2), round(max(v), 2), len(v)]
        for b, v in sorted(buckets.items())
    ]


def lag_series(ops: Iterable[Op], end: float) -> dict[str, list[list[float]]]:
    """Per member, the largest replication lag seen in each time bucket: [[t_s, lag_s], ...]."""
    buckets: dict[str, dict[int, float]] = defaultdict(dict)
    for op in ops:
        lags = op.detail.get("lag_s") if op.ok else None
        if not isinstance(lags, dict):
            continue
        b = _bucket_index(op.t_end, end)
        for member, lag in lags.items():
            if isinstance(lag, int | float) and math.isfinite(lag):
                member_buckets = buckets[str(member)]
                member_buckets[b] = max(member_buckets.get(b, 0.0), float(lag))
    width = end / BUCKETS
    return {
        # To 0.1 ms: a sub-millisecond lag is not drawn as none.
        member: [[_r((b + 0.5) * width), round(lag, 4)] for b, lag in sorted(points.items())]
        for member, points in sorted(buckets.items())
    }


def _fault_rows(result: Result, end: float) -> list[dict[str, Any]]:
    """Fault spans, each on the first row where it overlaps no earlier span."""
    rows_end: list[float] = []
    spans = []
    injected = [f for f in result.faults if f.injected_at_s is not None]
    for fault in sorted(injected, key=lambda f: f.injected_at_s or 0.0):
        t0 = fault.injected_at_s or 0.0
        t1 = end if fault.reverted_at_s is None else fault.reverted_at_s
        row = next((i for i, busy_until in enumerate(rows_end) if busy_until <= t0), len(rows_end))
        if row == len(rows_end):
            rows_end.append(t1)
        else:
            rows_end[row] = t1
        spans.append(
            {
                "kind": fault.kind,
                "target": fault.target,
                "t0": _r(t0),
                "t1": _r(t1),
                "reverted": fault.reverted_at_s is not None,
                "row": row,
            }
        )
    return spans


def _state_lanes(result: Result, end: float) -> list[dict[str, Any]]:
    lanes = []
    for member, changes in sorted(result.metrics.member_states.items()):
        ordered = sorted(changes, key=lambda change: change[0])
        ends = [t for t, _ in ordered[1:]] + [end]
        segments = [[_r(t), _r(t1), state] for (t, state), t1 in zip(ordered, ends, strict=True)]
        lanes.append({"member": member, "segments": segments})
    return lanes


def zone_strips(zones: dict[str, str], polls: Sequence[Op]) -> list[dict[str, Any]]:
    """A strip per zone (`zones`: member → zone), from the failover probe's polls of its
    members: up while one of them answers (its last poll ok), down while none does."""
    strips = []
    for zone in sorted(set(zones.values())):
        held = {m for m, z in zones.items() if z == zone}
        last: dict[str, bool] = {}
        rounds = []
        for op in sorted((p for p in polls if p.member in held), key=lambda p: p.t_start):
            last[op.member or ""] = op.ok
            up = "ok" if any(last.values()) else "error"
            rounds.append(Op(f"zone {zone}", op.op, op.member, op.t_start, op.t_end, up))
        if rounds:
            strips.append({"probe": f"zone {zone}", "runs": outcome_runs(rounds)})
    return strips


def timeline_data(result: Result, ops: Sequence[Op]) -> dict[str, Any]:
    """Everything the timeline chart draws, as JSON-ready data of bounded size."""
    by_probe = {p: of_probes(ops, p) for p in {*STRIP_PROBES, *LATENCY_PROBES, "failover", "lag"}}
    ends = [result.duration_s, last_end(ops)]
    ends += [f.reverted_at_s for f in result.faults if f.reverted_at_s is not None]
    end = max(max(ends), 1e-3)

    return {
        "start": 0,
        "end": _r(end),
        "outcomes": list(OUTCOMES),
        "faults": _fault_rows(result, end),
        "strips": [
            {"probe": probe, "runs": outcome_runs(by_probe[probe])}
            for probe in STRIP_PROBES
            if by_probe[probe]
        ]
        + zone_strips(result.target.zones, by_probe["failover"]),
        "states": _state_lanes(result, end),
        "latency_bucket_s": _r(end / BUCKETS),
        "latency": [
            {"probe": probe, "points": latency_series(by_probe[probe], end)}
            for probe in LATENCY_PROBES
            if any(op.ok for op in by_probe[probe])
        ],
        "lag": lag_series(by_probe["lag"], end),
        # rsdrill's own process not running (its longest stalls, bounded by the result).
        "stalls": [[_r(st.at_s), _r(st.at_s + st.seconds)] for st in result.metrics.probe_stalls],
    }
