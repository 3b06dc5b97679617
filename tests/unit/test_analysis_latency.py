"""Latency percentiles and degradation_s from hand-written histories."""

from __future__ import annotations

import dataclasses

import pytest

from rsdrill.analysis.latency import (
    STEP_S,
    Takeover,
    degradation_s,
    latency_ms,
    percentile,
    takeover,
)
from rsdrill.history import FaultRecord, Op
from rsdrill.result import Latency

A = "a:27017"


def load(t_end: float, latency_s: float, ok: bool = True, probe: str = "load") -> Op:
    op = {"load": "read", "write": "insert", "read": "find"}[probe]
    outcome, detail = ("ok", {}) if ok else ("timeout", {"error": "timed out"})
    return Op(probe, op, A, round(t_end - latency_s, 9), t_end, outcome, detail)


def every(start: float, stop: float, step: float, latency_s: float) -> list[Op]:
    """Ops ending every `step` s in [start, stop), each taking `latency_s`."""
    n = round((stop - start) / step)
    return [load(round(start + step * k, 6), latency_s) for k in range(n)]


def fault(injected: float, reverted: float | None) -> FaultRecord:
    return FaultRecord(0, "iops-throttle", A, injected, injected + 0.1, reverted)


def test_percentile_is_nearest_rank() -> None:
    assert percentile([float(v) for v in range(1, 11)], 50) == 5.0
    assert percentile([float(v) for v in range(1, 11)], 95) == 10.0
    hundred = [float(v) for v in range(1, 101)]
    assert [percentile(hundred, p) for p in (50, 95, 99, 100)] == [50.0, 95.0, 99.0, 100.0]
    assert percentile([7.0], 1) == 7.0


def test_latency_ms_over_ok_load_ops() -> None:
    ops = [load(10.0 + k, k / 1000) for k in range(1, 101)]
    ops += [load(200.0, 9.0, ok=False), load(201.0, 0.5, probe="write")]
    result = latency_ms(ops)
    assert [result.p50, result.p95, result.p99, result.max] == pytest.approx([50, 95, 99, 100])


def test_latency_ms_falls_back_to_write_and_read_ops() -> None:
    ops = [load(1.0, 0.002, probe="write"), load(2.0, 0.004, probe="read")]
    ops += [load(3.0, 0.006, probe="write"), load(4.0, 0.9, ok=False), load(5.0, 1.0, ok=False)]
    result = latency_ms(ops)
    assert [result.p50, result.p95, result.p99, result.max] == pytest.approx([4, 6, 6, 6])


def test_latency_ms_without_data_is_all_none() -> None:
    assert latency_ms([]) == Latency(p50=None, p95=None, p99=None, max=None)
    assert latency_ms([load(1.0, 0.1, ok=False, probe="write")]) == Latency()


def baseline() -> list[Op]:
    """40 ops before the fault at 5.0; their p99 (nearest rank: the max) is 12 ms."""
    return [*every(1.0, 4.9, 0.1, 0.010), load(4.95, 0.012)]


def test_degradation_ends_at_the_first_window_back_within_1_5x_baseline() -> None:
    ops = [
        *baseline(),
        *every(5.0, 20.0, 0.1, 0.300),  # under the fault
        *every(20.1, 22.0, 0.1, 0.100),  # still slow after the revert at 20.0
        *every(22.0, 30.0, 0.1, 0.015),  # back: 15 ms <= 1.5 x 12 ms
        load(25.0, 5.0, ok=False),  # failed ops are not latency samples
    ]
    assert degradation_s(ops, [fault(5.0, 20.0)]) == 2.0


def test_degradation_is_zero_when_already_fine() -> None:
    ops = [*baseline(), *every(20.0, 25.0, 0.1, 0.011)]
    assert degradation_s(ops, [fault(5.0, 20.0)]) == 0.0


def test_one_slow_op_keeps_a_window_degraded() -> None:
    ops = [*baseline(), *every(20.0, 25.0, 0.1, 0.011), load(20.55, 0.019)]
    # 19 ms > 1.5 x 12 ms: windows starting 20.0 to 20.5 hold the op ending at 20.55.
    assert degradation_s(ops, [fault(5.0, 20.0)]) == 0.75


def test_degradation_never_back_runs_to_the_end_of_the_data() -> None:
    ops = [*baseline(), *every(20.0, 30.0, 0.1, 0.050)]
    assert degradation_s(ops, [fault(5.0, 20.0)]) == pytest.approx(29.9 - 20.0)


def test_a_window_needs_five_ops() -> None:
    ops = [*baseline(), *every(20.5, 25.5, 0.5, 0.010)]  # two per window
    assert degradation_s(ops, [fault(5.0, 20.0)]) == pytest.approx(5.0)


def test_without_a_revert_it_counts_from_the_last_injection() -> None:
    ops = [*baseline(), *every(10.1, 11.5, 0.1, 0.200), *every(11.5, 15.0, 0.1, 0.010)]
    faults = [fault(5.0, None), fault(10.0, None)]
    assert degradation_s(ops, faults) == 1.5


def test_from_the_last_revert_of_several_faults() -> None:
    ops = [*baseline(), *every(30.1, 31.0, 0.1, 0.200), *every(31.0, 35.0, 0.1, 0.010)]
    faults = [fault(5.0, 30.0), fault(6.0, 20.0), fault(7.0, None)]
    assert degradation_s(ops, faults) == 1.0


def test_no_data_after_the_revert_is_zero() -> None:
    assert degradation_s(baseline(), [fault(5.0, 20.0)]) == 0.0


def test_degradation_needs_a_baseline_of_twenty_ops_and_a_fault() -> None:
    after = every(20.0, 22.0, 0.1, 0.5)
    twenty = every(3.0, 5.0, 0.1, 0.010)
    assert len(twenty) == 20
    assert degradation_s([*twenty[1:], *after], [fault(5.0, 20.0)]) is None
    assert degradation_s([*twenty, *after], [fault(5.0, 20.0)]) == pytest.approx(21.9 - 20.0)
    assert degradation_s([*twenty, *after], []) is None


def test_degradation_falls_back_to_write_and_read_ops() -> None:
    ops = [load(op.t_end, op.t_end - op.t_start, probe="write") for op in baseline()]
    ops += [load(20.1 + 0.1 * k, 0.010, probe="read") for k in range(10)]
    assert degradation_s(ops, [fault(5.0, 20.0)]) == 0.0


B = "b:27017"


def on(member: str, ops: list[Op]) -> list[Op]:
    return [dataclasses.replace(op, member=member) for op in ops]


def writable(member: str, t_end: float) -> Op:
    """The failover probe's hello answer: `member` is writable."""
    return Op("failover", "hello", member, t_end - 0.001, t_end, "ok", {"writable": True})


BEFORE = every(0.0, 10.0, 0.01, 0.005)


def test_a_warm_heir_is_degraded_for_no_time() -> None:
    # Reads queued through the hand-over end slow on the heir: its pause, not its cache.
    queued = on(B, [load(10.31, 0.3)] * 8)
    after = on(B, every(10.32, 15.0, 0.01, 0.005))
    taken = takeover([*BEFORE, writable(A, 5.0), writable(B, 10.3), *queued, *after], 10.0, B)
    assert taken == Takeover(
        baseline_s=pytest.approx(0.005), writable_s=pytest.approx(0.3), degraded_s=0.0
    )


def test_a_cold_heir_is_degraded_until_its_reads_are_fast_again() -> None:
    cold = on(B, every(10.4, 13.0, 0.01, 0.2))  # started from 10.2 on
    warm = on(B, every(13.0, 16.0, 0.01, 0.005))
    taken = takeover([*BEFORE, writable(B, 10.2), *cold, *warm], 10.0, B)
    assert taken is not None
    # The first window whose typical read is fast again (half of it from 13.0 s on) starts at
    # 12.5 s, 2.3 s after the heir was writable.
    assert taken.degraded_s == pytest.approx(2.3, abs=STEP_S)
    assert taken.writable_s == pytest.approx(0.2)


def test_a_busy_machine_s_odd_slow_reads_do_not_make_a_warm_heir_degraded() -> None:
    # After the hand-over one read in ten is 8 ms slower: the tail a loaded machine adds to any
    # member (an election, the clients reconnecting). By p99s against the quiet reads before,
    # the heir would be degraded for as long as it served.
    busy = [dataclasses.replace(op, t_start=op.t_start - 0.008) if k % 10 == 0 else op
            for k, op in enumerate(every(10.3, 15.0, 0.01, 0.005))]  # fmt: skip
    taken = takeover([*BEFORE, writable(B, 10.2), *on(B, busy)], 10.0, B)
    assert taken is not None and taken.degraded_s == 0.0


def test_a_slow_tail_before_the_hand_over_does_not_hide_a_cold_heir() -> None:
    # The set's reads before: 10 ms, one in twenty 111 ms (a loaded machine's p99). The cold
    # heir's: 160 ms for 3 s, every one of them, then 10 ms.
    before = [dataclasses.replace(op, t_start=op.t_end - 0.111) if k % 20 == 0 else op
              for k, op in enumerate(every(0.0, 10.0, 0.01, 0.010))]  # fmt: skip
    cold = on(B, every(10.3, 13.3, 0.01, 0.160))
    warm = on(B, every(13.3, 16.0, 0.01, 0.010))
    taken = takeover([*before, writable(B, 10.1), *cold, *warm], 10.0, B)
    assert taken is not None and taken.baseline_s == pytest.approx(0.010)
    assert taken.degraded_s == pytest.approx(2.75)  # the window from 12.85 s: most reads warm


def test_the_old_primary_s_reads_after_the_hand_over_do_not_count() -> None:
    late_on_a = every(10.0, 12.0, 0.01, 0.5)  # not the heir's
    heir = on(B, every(10.5, 12.0, 0.01, 0.005))
    taken = takeover([*BEFORE, writable(B, 10.4), *late_on_a, *heir], 10.0, B)
    assert taken is not None and taken.degraded_s == 0.0


def test_takeover_needs_a_baseline_and_the_heir_writable() -> None:
    heir = [writable(B, 10.1), *on(B, every(10.2, 11.0, 0.01, 0.005))]
    assert takeover([*every(9.9, 10.0, 0.01, 0.005), *heir], 10.0, B) is None
    assert takeover([*BEFORE, *heir[1:], writable(B, 9.0)], 10.0, B) is None
    assert takeover([*BEFORE, *heir], 10.0, B) is not None
