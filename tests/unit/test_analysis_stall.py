"""Stalls of rsdrill's own process (analysis/stall.py) from hand-written histories, and the
line the CLI and reports print about them."""

from __future__ import annotations

import pytest

from rsdrill.analysis.metrics import compute_metrics
from rsdrill.analysis.stall import STALLS_KEPT, probe_stall_s, stalled_gaps, stalls
from rsdrill.history import LATE_START_OP, Op
from rsdrill.report.common import stall_line
from rsdrill.result import Metrics, Stall, StalledGap

A, B = "a:27017", "b:27017"


def stall(due: float, woke: float) -> Op:
    return Op("stall", "wake", None, due, woke, "timeout", {"late_s": woke - due})


def probe_every(probe: str, start: float, stop: float, down: tuple[float, float]) -> list[Op]:
    """An attempt every 0.1 s, ok (5 ms) except while `down[0] <= t < down[1]` (failed, 50 ms)."""
    op = {"write": "insert", "raw_write": "insert", "read": "find"}[probe]
    ops = []
    for k in range(round((stop - start) / 0.1)):
        t = round(start + 0.1 * k, 6)
        if down[0] <= t < down[1]:
            ops.append(Op(probe, op, None, t, round(t + 0.05, 6), "timeout", {}))
        else:
            ops.append(Op(probe, op, A, t, round(t + 0.005, 6), "ok", {}))
    return ops


def test_no_stall_is_zero_and_flags_no_gap() -> None:
    ops = probe_every("write", 0.0, 10.0, down=(4.0, 6.0))
    assert probe_stall_s(ops) == 0.0
    assert stalls(ops) == [] and stalled_gaps(ops) == []
    metrics = compute_metrics(ops, [], duration_s=10.0)
    assert metrics.probe_stall_s == 0.0 and metrics.probe_stalled_gaps == []
    assert stall_line(metrics) is None


def test_a_stall_inside_the_write_gap_flags_it_and_not_the_read_gap() -> None:
    # Writes fail from 4.0 to 6.0 (the gap runs 3.905 → 6.005); reads fail from 12.0 to 13.0.
    # The process stalled 1.2 s at 4.5: inside the write gap, long before the read gap.
    ops = [
        *probe_every("write", 0.0, 20.0, down=(4.0, 6.0)),
        *probe_every("read", 0.0, 20.0, down=(12.0, 13.0)),
        stall(4.5, 5.7),
    ]
    assert probe_stall_s(ops) == pytest.approx(1.2)
    [gap] = stalled_gaps(ops)
    assert gap.metric == "write_unavailable_s"
    assert (gap.start_s, gap.end_s) == pytest.approx((3.905, 6.005))
    assert gap.stalled_s == pytest.approx(1.2) and gap.stall_at_s == 4.5
    metrics = compute_metrics(ops, [], duration_s=20.0)
    assert metrics.write_unavailable_s == pytest.approx(gap.end_s - gap.start_s)
    assert stall_line(metrics) == (
        "probes: this process stalled 1.2 s at t=4.5 s; the write gap 3.9-6.0 s overlaps it: "
        "it may be this machine's, not the cluster's"
    )


def test_a_stall_outside_every_gap_flags_none() -> None:
    ops = [*probe_every("write", 0.0, 20.0, down=(4.0, 6.0)), stall(10.0, 10.8)]
    assert probe_stall_s(ops) == pytest.approx(0.8)
    assert stalled_gaps(ops) == []
    line = stall_line(compute_metrics(ops, [], duration_s=20.0))
    assert line == "probes: this process stalled 0.8 s at t=10.0 s; no availability gap overlaps it"


def test_several_stalls_longest_first_partly_overlapping_gaps_summed() -> None:
    # The write gap 3.905 → 8.005 holds a 0.3 s stall whole and the first 0.5 s of a 1.0 s one;
    # the raw writer's gap (its own and the write probe's successes) is 3.905 → 5.005.
    ops = [
        *probe_every("write", 0.0, 20.0, down=(4.0, 8.0)),
        *probe_every("raw_write", 0.0, 20.0, down=(4.0, 5.0)),
        stall(2.0, 2.15),
        stall(4.2, 4.5),
        stall(7.5, 8.5),
        stall(15.0, 15.2),
    ]
    found = stalls(ops)
    assert [s.at_s for s in found] == [7.5, 4.2, 15.0, 2.0]
    assert [s.seconds for s in found] == pytest.approx([1.0, 0.3, 0.2, 0.15])
    assert probe_stall_s(ops) == pytest.approx(1.0)
    write, raw = stalled_gaps(ops)
    assert write.metric == "write_unavailable_s" and write.stall_at_s == 7.5
    assert write.stalled_s == pytest.approx(0.3 + (8.005 - 7.5))
    # Only the 0.3 s stall lies in the raw gap; it is the longest there.
    assert raw.metric == "raw_write_unavailable_s" and raw.stall_at_s == 4.2
    assert raw.stalled_s == pytest.approx(0.3)
    # The line names the gaps the longest stall overlaps: not the raw one.
    line = stall_line(compute_metrics(ops, [], duration_s=20.0))
    assert line is not None and "stalled 1.0 s at t=7.5 s; the write gap 3.9-8.0 s overlaps" in line
    assert "raw write" not in line


def test_one_stall_over_several_gaps_names_them_all() -> None:
    ops = [
        *probe_every("write", 0.0, 10.0, down=(4.0, 6.0)),
        *probe_every("read", 0.0, 10.0, down=(4.5, 6.5)),
        stall(4.6, 5.9),
    ]
    line = stall_line(compute_metrics(ops, [], duration_s=10.0))
    assert line == (
        "probes: this process stalled 1.3 s at t=4.6 s; the write gap 3.9-6.0 s and the read gap "
        "4.4-6.5 s overlap it: they may be this machine's, not the cluster's"
    )


def test_the_result_keeps_the_longest_stalls_only() -> None:
    ops = [stall(float(k), k + 0.1 + k / 1000) for k in range(3 * STALLS_KEPT)]
    metrics = compute_metrics(ops, [], duration_s=40.0)
    assert len(metrics.probe_stalls) == STALLS_KEPT
    assert metrics.probe_stalls[0].at_s == 3 * STALLS_KEPT - 1
    assert min(s.seconds for s in metrics.probe_stalls) > max(
        s.seconds for s in stalls(ops)[STALLS_KEPT:]
    )
    # A stall sends nothing to the cluster: not the probes' load.
    assert metrics.probe_ops_per_s == 0.0 and metrics.probe_ops_per_s_by_probe == {}
    # Below half a second nothing is said.
    assert stall_line(metrics) is None


def test_the_line_is_said_from_half_a_second() -> None:
    assert stall_line(Metrics(probe_stalls=[Stall(at_s=3.0, seconds=0.49)])) is None
    assert stall_line(Metrics(probe_stalls=[Stall(at_s=3.0, seconds=0.5)])) is not None
    gap = StalledGap(
        metric="read_unavailable_s", start_s=2.0, end_s=4.0, stalled_s=0.5, stall_at_s=3.0
    )
    metrics = Metrics(probe_stalls=[Stall(at_s=3.0, seconds=0.5)], probe_stalled_gaps=[gap])
    assert "the read gap 2.0-4.0 s overlaps it" in (stall_line(metrics) or "")


def late_start(probe: str, due: float, began: float) -> Op:
    return Op("stall", LATE_START_OP, None, due, began, "timeout", {"probe": probe})


def test_a_late_start_of_the_read_probe_flags_the_read_gap_by_its_lateness_only() -> None:
    # Reads fail from 4.0 to 4.3 (the gap runs 3.905 → 4.305); the read probe's attempt due at
    # 4.1 began 0.06 s late, and the write probe's at 4.2 (no write gap: not the read gap's).
    ops = [
        *probe_every("read", 0.0, 10.0, down=(4.0, 4.3)),
        *probe_every("write", 0.0, 10.0, down=(20.0, 20.0)),
        late_start("read", 4.1, 4.16),
        late_start("write", 4.2, 4.5),
    ]
    # Not a stall of the process: the stall probe saw none.
    assert stalls(ops) == [] and probe_stall_s(ops) == 0.0
    [gap] = stalled_gaps(ops)
    assert gap.metric == "read_unavailable_s" and gap.stall_at_s == 4.1
    assert gap.stalled_s == pytest.approx(0.06)
    assert stall_line(compute_metrics(ops, [], duration_s=10.0)) is None


def test_late_starts_and_stalls_that_overlap_count_once() -> None:
    ops = [
        *probe_every("read", 0.0, 10.0, down=(4.0, 5.0)),
        stall(4.2, 4.6),
        late_start("read", 4.5, 4.7),
        late_start("read", 4.8, 4.81),
    ]
    [gap] = stalled_gaps(ops)
    assert gap.stalled_s == pytest.approx(0.5 + 0.01)
    assert gap.stall_at_s == 4.2  # the longest of them
