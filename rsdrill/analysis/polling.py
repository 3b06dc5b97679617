"""When did a polled condition become true? Estimates from the polls on either side of it.

A poller sees a condition (a member writable, a member SECONDARY) only at its polls. The change
happened after the last poll that saw it false and before the first poll that saw it true; the
midpoint of that interval is off by at most half a poll interval.
"""

from __future__ import annotations

from rsdrill.history import Op


def transition_time(prev: Op | None, first: Op, since: float) -> float:
    """Estimate when a condition became true, knowing it happened after `since`.

    `first` is the first poll that saw the condition true, `prev` the last poll before it (ending
    at or before `first.t_start`) that saw it false. The estimate is
    `(prev.t_end + first.t_start) / 2` when `prev` exists and ended at or after `since`, else
    `first.t_start`; never earlier than `since` (a poll in flight across `since` may answer).
    A `first` the server sent because the condition changed (an awaited hello with
    `changed: true`: the member answers at the change) dates it: `first.t_end`.
    """
    if first.detail.get("changed") is True:
        return max(first.t_end, since)
    if prev is not None and prev.t_end >= since:
        return (prev.t_end + first.t_start) / 2
    return max(first.t_start, since)
