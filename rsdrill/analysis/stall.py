"""Stalls of rsdrill's own process, and the availability gaps they may have made.

While the process does not run, no probe records anything, so a stall of the probe host looks
like a gap of the cluster's. The stall probe (probes/stall.py) records each late wake-up of the
whole process (from 0.1 s); the availability probes each record an attempt they began late
(`LATE_START_OP`, from 10 ms: their thread starved of CPU or of the interpreter's lock, which
the process-wide probe is too coarse to see). From those this tells which gaps, and how much of
each, the process itself could have caused.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from rsdrill.analysis.availability import unavailable_window
from rsdrill.history import LATE_START_OP, STALL_PROBE, Op, of_probes
from rsdrill.result import Stall, StalledGap

STALLS_KEPT = 10
"""How many stalls the result lists (the longest): a starved machine stalls all the time."""

GAP_METRICS = {
    "write_unavailable_s": "write",
    "read_unavailable_s": "read",
    "raw_write_unavailable_s": "raw_write",
}
"""The availability metrics whose windows are checked against the stalls, and their probes."""


def stalls(ops: Sequence[Op]) -> list[Stall]:
    """Every stall of the probe process in the history, longest first (earliest first among
    equal ones)."""
    found = [
        Stall(at_s=op.t_start, seconds=op.t_end - op.t_start)
        for op in of_probes(ops, STALL_PROBE)
        if op.op != LATE_START_OP
    ]
    return sorted(found, key=lambda s: (-s.seconds, s.at_s))


def probe_stall_s(ops: Sequence[Op]) -> float:
    """`probe_stall_s`: the longest stall of rsdrill's own process, in seconds; 0.0 when none.

    A stall is a wake-up of the stall probe that came more than its threshold (0.1 s) late: for
    that long nothing of this process ran, no probe among them. A run whose figures must be the
    cluster's alone can assert it, e.g. `probe_stall_s: "< 0.5"`.
    """
    found = stalls(ops)
    return found[0].seconds if found else 0.0


def stalled_gaps(ops: Sequence[Op]) -> list[StalledGap]:
    """The windows behind `GAP_METRICS` that overlap a stall or a late start of their probe,
    in `GAP_METRICS`' order.

    `stalled_s` is how much of the window those overlap (an instant both cover counted once);
    `stall_at_s` the start of the longest stall among them (the earliest among equal ones),
    else of the longest late start. A window none touches is left out.
    """
    own = of_probes(ops, STALL_PROBE)
    process = [(op.t_start, op.t_end) for op in own if op.op != LATE_START_OP]
    gaps = []
    for metric, probe in GAP_METRICS.items():
        window = unavailable_window(ops, probe)
        if window is None:
            continue
        start, end = window
        late = [(op.t_start, op.t_end) for op in own
                if op.op == LATE_START_OP and op.detail.get("probe") == probe]  # fmt: skip
        stalled = [(a, b) for a, b in process if min(b, end) > max(a, start)]
        began_late = [(a, b) for a, b in late if min(b, end) > max(a, start)]
        touching = stalled + began_late
        if touching:
            # A stall of the whole process first: its probe's late start is the same stop.
            longest = min(stalled or began_late, key=lambda s: (s[0] - s[1], s[0]))
            gaps.append(
                StalledGap(
                    metric=metric,
                    start_s=start,
                    end_s=end,
                    stalled_s=_covered_s([(max(a, start), min(b, end)) for a, b in touching]),
                    stall_at_s=longest[0],
                )
            )
    return gaps


def _covered_s(spans: list[tuple[float, float]]) -> float:
    """How long the union of the spans (start, end) lasts."""
    total, reached = 0.0, -math.inf
    for a, b in sorted(spans):
        if b > reached:
            total += b - max(a, reached)
            reached = b
    return total
