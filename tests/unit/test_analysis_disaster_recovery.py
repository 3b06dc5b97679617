"""RTO, RPO, restore time and writes a backup missed, from hand-written drill histories."""

from __future__ import annotations

import pytest

from rsdrill.analysis.disaster_recovery import DisasterRecovery, disaster_recovery
from rsdrill.history import FaultRecord, Op

A = "a:27017"


def ledger(seq: int, t: float, ok: bool = True) -> Op:
    return Op("ledger", "insert", A, t, t + 0.01, "ok" if ok else "error", {"seq": seq})


def write(t: float, ok: bool = True) -> Op:
    return Op("write", "insert", A, t, t + 0.01, "ok" if ok else "timeout", {})


def step(marks: str, start: float, end: float, ok: bool = True) -> Op:
    return Op("step", marks, None, start, end, "ok" if ok else "error", {"marks": marks})


def readback(missing: list[int]) -> Op:
    return Op("ledger", "readback", A, 90.0, 90.1, "ok", {"checked": 9, "missing": missing})


def loss(index: int, host: str, at: float) -> FaultRecord:
    record = FaultRecord(index, "data-loss", host)
    record.injected_at_s = at
    return record


DRILL_FAULTS = [loss(0, "b:1", 20.0), loss(0, "c:1", 20.1), loss(0, A, 20.2)]


def drill_history() -> list[Op]:
    # Ledger writes every 2 s from t=2; backup 9..10; data lost at 20.2; restore 22..30.
    ops = [ledger(seq, 2.0 * seq) for seq in range(1, 10)]  # seqs 1..9 at t=2..18
    ops += [write(20.15), write(21.0, ok=False), write(31.0, ok=False), write(33.5), write(34.0)]
    ops += [step("backup", 9.0, 10.0), step("restore", 22.0, 30.0)]
    ops.append(readback([5, 6, 7, 8, 9]))  # everything acknowledged from t=10 on is gone
    return ops


def test_a_drill_is_measured_from_the_last_member_lost() -> None:
    got = disaster_recovery(drill_history(), DRILL_FAULTS)
    # The write at 20.15 started before the last member was lost: it does not end the outage.
    assert got.rto_s == pytest.approx(33.51 - 20.2)
    assert got.restore_s == pytest.approx(8.0)
    # The newest surviving write was seq 4, acknowledged at 8.01.
    assert got.rpo_s == pytest.approx(20.2 - 8.01)
    assert got.lost_before_backup == 0


def test_a_backup_that_misses_older_writes_is_counted() -> None:
    ops = [o for o in drill_history() if o.op != "readback"] + [readback([2, 5, 6, 7, 8, 9])]
    got = disaster_recovery(ops, DRILL_FAULTS)
    assert got.lost_before_backup == 1  # seq 2 was acknowledged at 4.01, before the backup


def test_no_data_loss_fault_means_no_drill_metrics() -> None:
    other = FaultRecord(0, "host-kill", A)
    other.injected_at_s = 5.0
    assert disaster_recovery(drill_history(), [other]) == DisasterRecovery()


def test_unknown_survivors_leave_rpo_unknown_and_a_failed_restore_has_no_duration() -> None:
    ops = [o for o in drill_history() if o.op != "readback" and o.probe != "step"]
    ops.append(step("restore", 22.0, 25.0, ok=False))
    got = disaster_recovery(ops, DRILL_FAULTS)
    assert (got.rpo_s, got.lost_before_backup, got.restore_s) == (None, None, None)
    assert got.rto_s == pytest.approx(33.51 - 20.2)
