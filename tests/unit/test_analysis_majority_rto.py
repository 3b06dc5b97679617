"""analysis.majority_rto: a lost majority's write outage split at the first failed write, the
forced reconfig, the survivor's primary and the clients' first acknowledged write."""

from __future__ import annotations

from rsdrill.analysis.majority_rto import majority_rto
from rsdrill.history import Op
from rsdrill.result import RecoveryDone


def write(t_start: float, t_end: float, ok: bool = True) -> Op:
    return Op("write", "insert", "h:1", t_start, t_end, "ok" if ok else "timeout")


def test_the_parts_sum_to_the_outage() -> None:
    ops = [
        write(0.90, 0.91),  # before the loss
        write(1.00, 1.25, ok=False),  # the first failed write: detection
        write(1.30, 1.55, ok=False),
        write(3.10, 3.12),  # began before the primary: not the clients' way back
        write(3.22, 3.24),
        write(3.26, 3.27),
    ]
    done = RecoveryDone(loss_at_s=1.0, forced_at_s=3.0, primary_at_s=3.2)
    rto = majority_rto(ops, done)
    assert (rto.detection_s, rto.decision_s, rto.election_s, rto.client_s) == (
        0.25, 1.75, 0.2, 0.04)  # fmt: skip
    assert rto.rto_s == 2.24


def test_a_part_that_did_not_happen_is_none() -> None:
    done = RecoveryDone(loss_at_s=1.0, forced_at_s=3.0)  # no primary came
    rto = majority_rto([write(1.0, 1.25, ok=False), write(4.0, 4.1)], done)
    assert rto.detection_s == 0.25 and rto.decision_s == 1.75
    assert (rto.election_s, rto.client_s, rto.rto_s) == (None, None, None)
