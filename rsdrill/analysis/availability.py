"""Availability as a client sees it: the longest window without a successful operation."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from rsdrill.history import Op, column_parts, probe_counts
from rsdrill.opcolumns import TIMES

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

Window = tuple[float, float]
"""(start, end) in seconds on the run's clock."""


def longest_window(
    attempts: Sequence[Op],
    succeeded: Callable[[Op], bool],
    held: Callable[[Op], bool] | None = None,
) -> Window | None:
    """The longest window in which no attempt succeeded, as (start, end).

    The windows are the gaps between the `t_end` of consecutive successful attempts (ordered by
    `t_end`), plus the open window from the last success to the end of the last attempt when
    attempts kept failing until then. An attempt for which `held` is true proves success over
    its whole span, `t_start` to `t_end` (an awaited hello that found a member unchanged): no
    window lies inside it. Failures before the first success (a probe warming up) open no
    window. With no success at all the whole span counts: first attempt's `t_start` to last
    attempt's `t_end`. None without attempts.
    """
    import numpy as np

    return window_of(
        np.array([op.t_start for op in attempts], dtype=float),
        np.array([op.t_end for op in attempts], dtype=float),
        np.array([succeeded(op) for op in attempts], dtype=bool),
        None if held is None else np.array([held(op) for op in attempts], dtype=bool),
    )


def window_of(
    t_start: NDArray[np.float64],
    t_end: NDArray[np.float64],
    ok: NDArray[np.bool_],
    held: NDArray[np.bool_] | None = None,
) -> Window | None:
    """`longest_window` of attempts given as arrays: their times, which succeeded, which
    proved success over their whole span."""
    import numpy as np

    if not len(t_end):
        return None
    last_end = float(t_end.max())
    if held is None or not held.any():
        return _point_window(np.sort(t_end[ok]), float(t_start.min()), last_end)
    starts = np.concatenate([t_end[ok], t_start[held]])
    ends = np.concatenate([t_end[ok], t_end[held]])
    order = np.lexsort((ends, starts))
    starts, ends = starts[order], ends[order]
    reached = np.maximum.accumulate(ends)
    # Candidates in the order the first longest is taken from: the open window, then the gaps.
    opens = np.concatenate([[reached[-1]], reached[:-1]])
    closes = np.concatenate([[last_end], starts[1:]])
    best = int(np.argmax(closes - opens))
    return float(opens[best]), float(closes[best])


def _point_window(ends: NDArray[np.float64], first_start: float, last_end: float) -> Window:
    """`window_of` of attempts with no `held` span: their successes' `ends`, sorted, each the
    reach of those before it; one array of their gaps is all it adds."""
    import numpy as np

    if not len(ends):
        return first_start, last_end
    gaps = np.diff(ends)
    best = int(np.argmax(gaps)) if len(gaps) else -1
    # The open window wins a tie: it is the first candidate.
    if best < 0 or last_end - ends[-1] >= gaps[best]:
        return float(ends[-1]), last_end
    return float(ends[best]), float(ends[best + 1])


def longest_gap(
    attempts: Sequence[Op],
    succeeded: Callable[[Op], bool],
    held: Callable[[Op], bool] | None = None,
) -> float | None:
    """The length, in seconds, of `longest_window`; None without attempts."""
    window = longest_window(attempts, succeeded, held)
    return None if window is None else window[1] - window[0]


def unavailable_window(ops: Sequence[Op], probe: str) -> Window | None:
    """The window behind `unavailable_s(ops, probe)`: (start, end), or None when that is None."""
    if probe == "raw_write" and not probe_counts(ops)[probe]:
        return None
    import numpy as np

    probes = (probe, "write") if probe == "raw_write" else (probe,)
    # A part at a time. The successes' ends, sorted: where each part's come after the last
    # one's (a probe that writes one at a time), the gaps are found part by part and nothing is
    # held; else they are gathered and sorted.
    first_start, last_end, reached, in_order = math.inf, -math.inf, -math.inf, True
    for part in column_parts(ops, *probes, fields=TIMES):
        if len(part):
            first_start = min(first_start, float(part.t_start.min()))
            last_end = max(last_end, float(part.t_end.max()))
            ends = part.t_end[part.ok]
            if len(ends):
                in_order = in_order and float(ends.min()) >= reached
                reached = max(reached, float(ends.max()))
    if last_end == -math.inf:
        return None
    if not in_order:
        gathered = [p.t_end[p.ok] for p in column_parts(ops, *probes, fields=TIMES)]
        successes = np.concatenate(gathered)
        successes.sort()
        return _point_window(successes, first_start, last_end)
    best: Window | None = None
    previous: float | None = None
    for part in column_parts(ops, *probes, fields=TIMES):
        ends = np.sort(part.t_end[part.ok])
        if not len(ends):
            continue
        if previous is not None and (best is None or ends[0] - previous > best[1] - best[0]):
            best = previous, float(ends[0])
        if len(ends) > 1:
            gaps = np.diff(ends)
            i = int(np.argmax(gaps))
            if best is None or gaps[i] > best[1] - best[0]:
                best = float(ends[i]), float(ends[i + 1])
        previous = float(ends[-1])
    if previous is None:
        return first_start, last_end
    # The open window wins a tie: it is the first candidate.
    if best is None or last_end - previous >= best[1] - best[0]:
        return previous, last_end
    return best


def unavailable_s(ops: Sequence[Op], probe: str) -> float | None:
    """`write_unavailable_s` (probe "write"), `read_unavailable_s` (probe "read") or
    `raw_write_unavailable_s` (probe "raw_write": the server's own gap, without the driver's).

    The longest window without a successful operation of that probe (see `longest_window`);
    None when the probe recorded nothing. For "raw_write" a write the availability probe got
    acknowledged is the server taking a write as well, so both probes' attempts count (the raw
    writer sends nothing while those succeed).
    """
    window = unavailable_window(ops, probe)
    return None if window is None else window[1] - window[0]


def driver_write_delay_s(ops: Sequence[Op]) -> float | None:
    """`driver_write_delay_s`: how much longer the application's longest write gap was than the
    server's, `write_unavailable_s - raw_write_unavailable_s`: the driver's share (pymongo
    re-checks a server it marked Unknown at most every minHeartbeatFrequencyMS, 500 ms).

    None unless both were measured. Each is sampled at its probe's interval, so the difference
    of one outage lies within about two intervals of the driver's share, and may dip below 0.
    """
    application, raw = unavailable_s(ops, "write"), unavailable_s(ops, "raw_write")
    return None if application is None or raw is None else application - raw
