"""Replication lag, as the primary reports it for its healthy secondaries."""

from __future__ import annotations

from collections.abc import Sequence

from rsdrill.history import Op, batches


def replication_lag_max_s(ops: Sequence[Op]) -> float | None:
    """`replication_lag_max_s`: the largest lag of any secondary in any answered "lag" poll.

    None when no lag poll reported a secondary (no lag probe, or rs1 with none to report).
    """
    lags = [
        float(lag)
        for batch in batches(ops, "lag")
        for op in batch
        if op.ok
        for lag in op.detail.get("lag_s", {}).values()
    ]
    return max(lags, default=None)
