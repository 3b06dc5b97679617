"""Stalls of rsdrill's own process, and the availability gaps they may have made.

While the process does not run, no probe records anything, so a stall of the probe host looks
like a gap of the cluster's. The stall probe (probes/stall.py) records each late wake-up; from
those this tells which gaps the process itself could have caused.
"""

from __future__ import annotations

from collections.abc import Sequence

from rsdrill.analysis.availability import unavailable_window
from rsdrill.history import STALL_PROBE, Op, of_probes
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
        Stall(at_s=op.t_start, seconds=op.t_end - op.t_start) for op in of_probes(ops, STALL_PROBE)
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
    """The windows behind `GAP_METRICS` that overlap a stall, in `GAP_METRICS`' order.

    `stalled_s` is how much of the window the stalls overlap; `stall_at_s` the start of the
    longest of them. A window no stall touches is left out.
    """
    found = stalls(ops)
    gaps = []
    for metric, probe in GAP_METRICS.items():
        window = unavailable_window(ops, probe)
        if window is None:
            continue
        start, end = window
        overlaps = [(s, min(end, s.at_s + s.seconds) - max(start, s.at_s)) for s in found]
        overlaps = [(s, seconds) for s, seconds in overlaps if seconds > 0]
        if overlaps:
            gaps.append(
                StalledGap(
                    metric=metric,
                    start_s=start,
                    end_s=end,
                    stalled_s=sum(seconds for _, seconds in overlaps),
                    # `found` is longest first, and so is `overlaps`.
                    stall_at_s=overlaps[0][0].at_s,
                )
            )
    return gaps
