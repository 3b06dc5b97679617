"""The write outage of a lost voting majority, recovered by the runbook's forced reconfig, in
the parts operations teams speak of: detection, decision, election, client rediscovery.

A pure function of the history and of what the runbook did when (`RecoveryDone`): the clients'
side is the availability probe's writes.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rsdrill.history import Op, columns
from rsdrill.opcolumns import TIMES

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray
from rsdrill.result import RecoveryDone, RtoParts


def majority_rto(ops: Sequence[Op], done: RecoveryDone) -> RtoParts:
    """`done`'s outage in parts; a part is None when what bounds it did not happen (no write
    failed after the loss, no forced reconfig, no primary, no write acknowledged after it).

    - detection_s: the loss → the end of the first write that failed after it;
    - decision_s: → the forced reconfig answered (the runbook's `after`, less detection);
    - election_s: → a survivor seen writable primary;
    - client_s: → the end of the first write acknowledged that began after that;
    - rto_s: the loss → that write (their sum when all are known).
    """
    writes = columns(ops, "write", fields=TIMES)
    failed = _first_end(writes.t_end[~writes.ok & (writes.t_end >= done.loss_at_s)])
    back = None
    if done.primary_at_s is not None:
        back = _first_end(writes.t_end[writes.ok & (writes.t_start >= done.primary_at_s)])
    marks = [done.loss_at_s, failed, done.forced_at_s, done.primary_at_s, back]
    parts = [_between(a, b) for a, b in itertools.pairwise(marks)]
    return RtoParts(rto_s=_between(done.loss_at_s, back), detection_s=parts[0],
                    decision_s=parts[1], election_s=parts[2], client_s=parts[3])  # fmt: skip


def _first_end(ends: NDArray[np.float64]) -> float | None:
    return float(ends.min()) if len(ends) else None


def _between(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else round(end - start, 3)
