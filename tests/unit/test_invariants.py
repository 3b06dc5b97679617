"""The soak's invariant checker on hand-made histories: valid ones pass, each kind of violation
is found and named."""

from __future__ import annotations

import math

from rsdrill.analysis.invariants import (
    RegisterOp,
    check_invariants,
    linearizable,
    monotonic_read_violation,
    register_ops,
    two_primaries,
)
from rsdrill.history import FaultRecord, Op

W, R = "write", "read"
INF = math.inf


def _h(*ops: tuple[str, int | None, float, float]) -> list[RegisterOp]:
    return [RegisterOp("write", 0, -INF, -INF), *(RegisterOp(*op) for op in ops)]


def test_sequential_reads_of_the_latest_write_are_linearizable() -> None:
    assert linearizable(_h((W, 1, 0, 1), (R, 1, 2, 3), (W, 2, 4, 5), (R, 2, 6, 7))) is None


def test_a_read_concurrent_with_a_write_may_see_either_value() -> None:
    assert linearizable(_h((W, 1, 0, 4), (R, 0, 1, 2), (R, 1, 2.5, 3))) is None
    assert linearizable(_h((W, 1, 0, 4), (R, 1, 1, 2))) is None


def test_a_stale_read_after_an_acknowledged_write_is_not_linearizable() -> None:
    stuck = linearizable(_h((W, 1, 0, 1), (W, 2, 2, 3), (R, 1, 4, 5)))
    assert stuck == RegisterOp("read", 1, 4, 5)


def test_reads_going_back_and_forth_during_a_write_are_not_linearizable() -> None:
    # 1 then 0 then 1 while write(1) is in flight: once seen, 1 cannot be un-written.
    assert linearizable(_h((W, 1, 0, 10), (R, 1, 1, 2), (R, 0, 3, 4), (R, 1, 5, 6))) is not None


def test_a_read_of_a_value_never_written_is_not_linearizable() -> None:
    assert linearizable(_h((W, 1, 0, 1), (R, 7, 2, 3))) is not None


def test_an_indeterminate_write_may_take_effect_late_or_never() -> None:
    # write(1) timed out; a later read sees it after write(2) completed: it landed late.
    assert linearizable(_h((W, 1, 0, INF), (W, 2, 1, 2), (R, 2, 3, 4), (R, 1, 5, 6))) is None
    # Never seen: it need not have happened.
    assert linearizable(_h((W, 1, 0, INF), (R, 0, 5, 6))) is None
    # But it cannot land before it was sent.
    assert linearizable(_h((R, 1, 0, 1), (W, 1, 2, INF))) is not None


def test_a_long_sequential_history_is_checked_quickly() -> None:
    ops = []
    for v in range(1, 1500):
        ops += [(W, v, v * 10.0, v * 10.0 + 1), (R, v, v * 10.0 + 2, v * 10.0 + 3)]
        if v % 7 == 0:
            ops.append((W, 100_000 + v, v * 10.0 + 4, INF))  # lost replies, never seen
    assert linearizable(_h(*ops)) is None


def test_monotonic_reads() -> None:
    assert monotonic_read_violation(_h((R, 1, 0, 1), (R, 1, 2, 3), (R, 3, 4, 5))) is None
    earlier, later = monotonic_read_violation(_h((R, 3, 0, 1), (R, 2, 2, 3))) or (None, None)
    assert earlier is not None and later is not None
    assert (earlier.value, later.value) == (3, 2)


def _op(probe: str, op: str, member: str | None, t: float, outcome: str = "ok",
        **detail: object) -> Op:  # fmt: skip
    return Op(probe, op, member, t, t + 0.01, outcome, dict(detail))


def _valid_history() -> list[Op]:
    return [
        _op("failover", "hello", "a:1", 0.0, writable=True, election_id="e1"),
        _op("failover", "hello", "b:1", 0.0, writable=False),
        _op("register", "write", "a:1", 0.1, value=1),
        _op("register", "read", "a:1", 0.2, value=1),
        _op("register", "write", "a:1", 0.3, "timeout", value=2),
        _op("failover", "hello", "b:1", 5.0, writable=True, election_id="e2"),
        _op("register", "write", "b:1", 5.1, value=3),
        _op("register", "read", "b:1", 5.2, value=3),
        _op("recovery", "status", "a:1", 6.0, state="SECONDARY"),
        _op("recovery", "status", "b:1", 6.0, state="PRIMARY"),
    ]


def test_a_valid_run_breaks_nothing() -> None:
    faults = [FaultRecord(0, "host-kill", "a:1", injected_at_s=0.35, reverted_at_s=3.0)]
    ops = _valid_history()
    assert register_ops(ops)[-1] == RegisterOp("read", 3, 5.2, 5.21)
    assert check_invariants(ops, faults, lost_acknowledged=[], recovery_slo_s=30) == []


def test_each_violation_is_named() -> None:
    ops = [
        *_valid_history(),
        # A stale majority read after write(3) was acknowledged: lost on failover.
        _op("register", "read", "b:1", 7.0, value=1),
        # Two members writable under one electionId.
        _op("failover", "hello", "a:1", 7.0, writable=True, election_id="e2"),
        _op("recovery", "status", "c:1", 8.0, state="RECOVERING"),
    ]
    faults = [FaultRecord(0, "host-kill", "a:1", injected_at_s=0.35, reverted_at_s=3.0)]
    found = check_invariants(ops, faults, lost_acknowledged=[41, 42], recovery_slo_s=1.0)
    names = [v.invariant for v in found]
    assert names == ["lost-write", "two-primaries", "recovery", "recovery",
                     "monotonic-reads", "linearizable"]  # fmt: skip
    assert "seq 41, 42" in found[0].detail
    assert "a:1, b:1" in found[1].detail
    assert any("c:1 ended RECOVERING" in v.detail for v in found)
    assert any("a:1 healthy 3.0s after its revert" in v.detail for v in found)


def test_two_sets_primaries_in_the_same_term_are_not_two_primaries() -> None:
    # MongoDB's electionId is the term's: two shards elected in term 1 both say it.
    ops = [
        _op("failover", "hello", "a:1", 1.0, writable=True, election_id="t1", set="shard0"),
        _op("failover", "hello", "b:1", 1.0, writable=True, election_id="t1", set="shard1"),
    ]
    assert two_primaries(ops) is None
    same_set = [*ops, _op("failover", "hello", "c:1", 2.0, writable=True, election_id="t1",
                          set="shard0")]  # fmt: skip
    assert two_primaries(same_set) == ("t1 of shard0", ["a:1", "c:1"])
