"""The timeline chart's data: a history of any length reduced to what a 1200-pixel chart can show.

A run of 10 minutes at 20 ms per probe, plus a load generator, is hundreds of thousands of
attempts; the chart needs runs of equal outcome, a latency curve and state segments. Everything
here is bounded by constants below, never by the history's length, so report.html stays small.
Times are seconds since run start, rounded to the millisecond.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from rsdrill.history import (
    Op,
    batches,
    column_parts,
    columns,
    last_end,
    of_probes,
    probe_counts,
)
from rsdrill.opcolumns import TIMES, OpColumns
from rsdrill.result import Result

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

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


def _severities(attempts: OpColumns) -> NDArray[np.int8]:
    import numpy as np

    # An outcome the reports do not know is shown as the worst, not hidden as ok.
    table = [OUTCOMES.index(n) if n in OUTCOMES else len(OUTCOMES) - 1
             for n in attempts.names["outcome"]]  # fmt: skip
    return np.array(table or [0], dtype=np.int8)[attempts.outcome]


def outcome_runs(ops: Sequence[Op] | OpColumns) -> list[list[float | int]]:
    """Runs of one strip as [t0, t1, outcome index, attempts, attempts not ok].

    Consecutive attempts (by start time) with the same outcome form one run, from the first's
    start to the latest end; beyond `MAX_RUNS` runs (flapping, many load threads) they are merged
    into time buckets drawn with their worst outcome.
    """
    runs = _strip([ops if isinstance(ops, OpColumns) else OpColumns.of(ops)])
    assert runs is not None  # one part is always in order
    return _rounded(runs)


def strip_runs(ops: Sequence[Op], probe: str) -> list[list[float | int]]:
    """`outcome_runs` of `probe`'s attempts, read a spilled batch at a time: when each batch's
    attempts start after the last one's (a probe that sends one at a time), only the runs are
    held; else the whole strip is read at once."""
    runs = _strip(column_parts(ops, probe, fields=TIMES))
    if runs is None:
        runs = _strip([columns(ops, probe, fields=TIMES)])
    assert runs is not None  # one part is always in order
    return _rounded(runs)


def _rounded(runs: list[list[float | int]]) -> list[list[float | int]]:
    return [[_r(t0), _r(t1), *rest] for t0, t1, *rest in runs]


def _strip(parts: Iterable[OpColumns]) -> list[list[float | int]] | None:
    """The runs of attempts given in parts, each after the one before by start time; None when
    a part starts before the previous one's last start, or when runs of several parts are too
    many (they are bucketed from the whole strip)."""
    import numpy as np

    runs: list[list[float | int]] = []
    latest_start, first, last = -math.inf, math.inf, -math.inf
    seen: list[OpColumns] = []  # the last part: all of them when there was one
    parts_seen = 0
    for part in parts:
        if not len(part):
            continue
        order = np.argsort(part.t_start, kind="stable")
        severity = _severities(part)[order]
        t0, t1 = part.t_start[order], part.t_end[order]
        del order
        if t0[0] < latest_start:
            return None
        latest_start, first = float(t0[-1]), min(first, float(t0[0]))
        last = max(last, float(t1.max()))
        seen = [part]
        starts = np.concatenate([[0], np.flatnonzero(np.diff(severity)) + 1])
        fields = (
            t0[starts],
            np.maximum.reduceat(t1, starts),
            severity[starts],
            np.diff(np.append(starts, len(t0))),
            np.add.reduceat((severity > 0).astype(np.int32), starts),
        )
        mine = [list(run) for run in zip(*(f.tolist() for f in fields), strict=True)]
        if runs and runs[-1][2] == mine[0][2]:  # one run across the parts' boundary
            runs[-1][1] = max(runs[-1][1], mine[0][1])
            runs[-1][3] += mine[0][3]
            runs[-1][4] += mine[0][4]
            mine = mine[1:]
        runs.extend(mine)
        parts_seen += 1
        if len(runs) > MAX_RUNS and parts_seen > 1:
            return None
    if len(runs) <= MAX_RUNS:
        return runs
    return _bucketed_runs(seen[0], first, last)


def _bucketed_runs(attempts: OpColumns, first: float, last: float) -> list[list[float | int]]:
    import numpy as np

    width = max(last - first, 1e-3) / MAX_RUNS

    def index(t: NDArray[np.float64]) -> NDArray[np.int64]:
        return np.minimum(MAX_RUNS - 1, ((t - first) / width).astype(np.int64))

    severities = _severities(attempts)
    start = index(attempts.t_start)
    count = np.bincount(start, minlength=MAX_RUNS).tolist()
    bad = np.bincount(start, weights=severities > 0, minlength=MAX_RUNS).astype(int).tolist()
    severity = np.full(MAX_RUNS, -1)
    np.maximum.at(severity, start, severities)
    # A failed attempt colors all the time it spent failing (a 10 s timeout is 10 s amber);
    # an ok one only its start, so a slow success does not paint over its neighbours.
    failed = np.flatnonzero(severities > 0)
    for b0, b1, s in zip(start[failed].tolist(), index(attempts.t_end[failed]).tolist(),
                         severities[failed].tolist(), strict=True):  # fmt: skip
        severity[b0 : b1 + 1] = np.maximum(severity[b0 : b1 + 1], s)

    runs: list[list[float | int]] = []
    for b, level in enumerate(severity.tolist()):
        # An empty bucket is the pause between two attempts: it continues the current run.
        if level < 0 or (runs and runs[-1][2] == level):
            if runs:
                runs[-1][1] = first + (b + 1) * width
                runs[-1][3] += count[b]
                runs[-1][4] += bad[b]
            continue
        runs.append([first + b * width, first + (b + 1) * width, level, count[b], bad[b]])
    return runs


def _bucket_index(t: float, end: float) -> int:
    return min(BUCKETS - 1, max(0, int(t / end * BUCKETS)))


def latency_series(parts: Iterable[OpColumns], end: float) -> list[list[float | int]]:
    """Successful attempts' latency per time bucket: [bucket middle s, p50 ms, max ms, attempts].
    From the attempts' columns in parts (any order): only the successes' latencies are held."""
    import numpy as np

    by_bucket: dict[int, list[NDArray[np.float64]]] = defaultdict(list)
    for part in parts:
        ok = part.ok
        if not ok.any():
            continue
        starts = part.t_start[ok]
        values = (part.t_end[ok] - starts) * 1000
        buckets = np.clip((starts / end * BUCKETS).astype(np.int64), 0, BUCKETS - 1)
        order = np.argsort(buckets, kind="stable")
        buckets, values = buckets[order], values[order]
        firsts = np.flatnonzero(np.diff(buckets, prepend=-1))
        for b, v in zip(buckets[firsts].tolist(), np.split(values, firsts[1:]), strict=True):
            by_bucket[b].append(v)
    width = end / BUCKETS
    series: list[list[float | int]] = []
    for b, chunks in sorted(by_bucket.items()):
        v = np.concatenate(chunks)
        series.append([_r((b + 0.5) * width), round(float(np.median(v)), 2),
                       round(float(v.max()), 2), len(v)])  # fmt: skip
    return series


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
    ends = [result.duration_s, last_end(ops)]
    ends += [f.reverted_at_s for f in result.faults if f.reverted_at_s is not None]
    end = max(max(ends), 1e-3)
    # One probe's columns at a time: a day's run has millions of attempts of each.
    latency = []
    counts = probe_counts(ops)
    strips = [{"probe": p, "runs": strip_runs(ops, p)} for p in STRIP_PROBES if counts[p]]
    for probe in LATENCY_PROBES:
        points = latency_series(column_parts(ops, probe, fields=TIMES), end)
        if points:
            latency.append({"probe": probe, "points": points})

    return {
        "start": 0,
        "end": _r(end),
        "outcomes": list(OUTCOMES),
        "faults": _fault_rows(result, end),
        "strips": strips
        + (
            zone_strips(result.target.zones, of_probes(ops, "failover"))
            if result.target.zones
            else []
        ),
        "states": _state_lanes(result, end),
        "latency_bucket_s": _r(end / BUCKETS),
        "latency": latency,
        "lag": lag_series((op for batch in batches(ops, "lag") for op in batch), end),
        # rsdrill's own process not running (its longest stalls, bounded by the result).
        "stalls": [[_r(st.at_s), _r(st.at_s + st.seconds)] for st in result.metrics.probe_stalls],
    }
