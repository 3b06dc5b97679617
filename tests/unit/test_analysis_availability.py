"""write_unavailable_s / read_unavailable_s from hand-written histories, plus properties."""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rsdrill.analysis.availability import (
    driver_write_delay_s,
    longest_gap,
    longest_window,
    unavailable_s,
    unavailable_window,
)
from rsdrill.history import Op

A = "a:27017"


def attempt(t_start: float, t_end: float, ok: bool = True, probe: str = "write") -> Op:
    op = "insert" if probe == "write" else "find"
    if ok:
        return Op(probe, op, A, t_start, t_end, "ok", {"seq": 0})
    detail = {"seq": 0, "error": "timed out", "code": None, "type": "NetworkTimeout"}
    return Op(probe, op, None, t_start, t_end, "timeout", detail)


def test_no_ops_is_none() -> None:
    assert unavailable_s([], "write") is None
    assert unavailable_s([attempt(0.0, 0.1, probe="read")], "write") is None


def test_the_window_is_where_the_longest_gap_lies() -> None:
    ops = [attempt(0.0, 0.1), attempt(0.2, 0.3), attempt(0.4, 1.5, ok=False), attempt(2.0, 2.1),
           attempt(2.2, 2.3), attempt(2.4, 2.9, ok=False)]  # fmt: skip
    assert longest_window(ops, lambda op: op.ok) == pytest.approx((0.3, 2.1))
    assert unavailable_window(ops, "write") == pytest.approx((0.3, 2.1))
    assert longest_gap(ops, lambda op: op.ok) == pytest.approx(1.8)
    # Still failing at the end: the open window is the longest.
    ops.append(attempt(3.0, 5.0, ok=False))
    assert longest_window(ops, lambda op: op.ok) == pytest.approx((2.3, 5.0))
    # No success at all: the whole span.
    assert longest_window(ops[2:3], lambda op: op.ok) == pytest.approx((0.4, 1.5))
    assert unavailable_window(ops, "read") is None


def test_the_driver_delay_is_the_application_gap_beyond_the_raw_gap() -> None:
    # The server is back at 12.0: the raw prober writes at once, pymongo 0.4 s later.
    raw = [attempt(1.98, 2.0, probe="raw_write"), attempt(12.0, 12.02, probe="raw_write")]
    app = [attempt(1.99, 2.01), attempt(2.1, 2.35, ok=False), attempt(12.4, 12.43)]
    assert unavailable_s(raw, "raw_write") == pytest.approx(10.02)
    # pymongo's acknowledged write at 2.01 is the server's last write before the outage too.
    assert unavailable_s(raw + app, "raw_write") == pytest.approx(12.02 - 2.01)
    assert driver_write_delay_s(raw + app) == pytest.approx(10.42 - 10.01)
    assert driver_write_delay_s(app) is None and driver_write_delay_s(raw) is None


def test_the_raw_gap_counts_the_application_writes_the_raw_writer_left_to_them() -> None:
    # Quiet until 3.0 (pymongo's writes succeed, the raw writer sends nothing); the raw writer
    # writes from the first pymongo failure on and finds the server back at 5.0.
    app = [attempt(t, t + 0.01) for t in (1.0, 2.0, 3.0)] + [attempt(3.02, 5.5, ok=False)]
    raw = [attempt(t, t + 0.01, ok=False, probe="raw_write") for t in (3.04, 4.0)]
    raw += [attempt(5.0, 5.01, probe="raw_write")]
    assert unavailable_s(app + raw, "raw_write") == pytest.approx(5.01 - 3.01)
    assert unavailable_s(app, "raw_write") is None


def test_steady_writes_give_the_poll_interval() -> None:
    ops = [attempt(1.0, 1.01), attempt(1.1, 1.11), attempt(1.2, 1.21)]
    assert unavailable_s(ops, "write") == pytest.approx(0.1)


def test_gap_is_between_the_ends_of_consecutive_successes() -> None:
    ops = [
        attempt(1.0, 1.01),
        attempt(2.0, 2.01),
        attempt(2.1, 2.35, ok=False),
        attempt(2.4, 2.65, ok=False),
        attempt(10.5, 10.52),
        attempt(10.6, 10.61),
    ]
    assert unavailable_s(ops, "write") == pytest.approx(10.52 - 2.01)


def test_failures_until_the_end_count_as_an_open_window() -> None:
    ops = [attempt(1.0, 1.01), attempt(2.0, 2.01), attempt(2.1, 3.1, ok=False)]
    ops += [attempt(3.2, 7.5, ok=False)]
    assert unavailable_s(ops, "write") == pytest.approx(7.5 - 2.01)


def test_open_window_counts_only_when_longer_than_the_gaps() -> None:
    ops = [attempt(1.0, 1.01), attempt(5.0, 5.01), attempt(5.1, 6.0, ok=False)]
    assert unavailable_s(ops, "write") == pytest.approx(4.0)


def test_no_success_at_all_spans_first_start_to_last_end() -> None:
    ops = [attempt(0.9, 1.15, ok=False), attempt(1.2, 1.45, ok=False), attempt(4.0, 5.0, ok=False)]
    assert unavailable_s(ops, "write") == pytest.approx(4.1)


def test_failures_before_the_first_success_open_no_window() -> None:
    ops = [attempt(0.0, 0.5, ok=False), attempt(0.5, 3.0), attempt(3.1, 3.5)]
    assert unavailable_s(ops, "write") == pytest.approx(0.5)


def test_a_single_success_is_zero() -> None:
    assert unavailable_s([attempt(1.0, 1.2)], "write") == 0.0


def test_order_of_the_history_does_not_matter() -> None:
    ops = [attempt(9.0, 9.01), attempt(1.0, 1.01), attempt(3.0, 3.5, ok=False), attempt(2.0, 2.01)]
    assert unavailable_s(ops, "write") == pytest.approx(7.0)


def test_read_probe_is_measured_apart_from_writes() -> None:
    ops = [
        attempt(1.0, 1.01, probe="read"),
        attempt(1.5, 1.51),
        attempt(4.0, 4.01, probe="read"),
        attempt(4.5, 4.51),
    ]
    assert unavailable_s(ops, "read") == pytest.approx(3.0)
    assert unavailable_s(ops, "write") == pytest.approx(3.0)
    assert unavailable_s(ops[:3], "write") == 0.0


def test_jittered_intervals_take_the_longest() -> None:
    ends = [1.0, 1.013, 1.041, 1.049, 1.102, 1.107]
    ops = [attempt(t - 0.004, t) for t in ends]
    assert unavailable_s(ops, "write") == pytest.approx(0.053)


def test_longest_gap_with_a_custom_success() -> None:
    ops = [attempt(0.0, 1.0), attempt(1.0, 2.0), attempt(2.0, 6.0)]
    assert longest_gap(ops, lambda op: op.t_end != 2.0) == pytest.approx(5.0)


# -- properties -----------------------------------------------------------------------------------

_step = st.tuples(
    st.floats(0.0, 5.0),  # pause before the attempt
    st.floats(0.0, 2.0),  # its duration
    st.booleans(),  # succeeded
)


def _sequential(steps: list[tuple[float, float, bool]]) -> list[Op]:
    ops, t = [], 0.0
    for pause, duration, ok in steps:
        ops.append(attempt(t + pause, t + pause + duration, ok=ok))
        t += pause + duration
    return ops


@given(st.lists(_step, min_size=1, max_size=40))
def test_property_at_least_every_gap_between_successes(steps: list[tuple[float, float, bool]]):
    ops = _sequential(steps)
    result = unavailable_s(ops, "write")
    assert result is not None
    ok_ends = [op.t_end for op in ops if op.ok]
    for a, b in pairwise(ok_ends):
        assert result >= b - a - 1e-9
    assert result <= ops[-1].t_end - ops[0].t_start + 1e-9


@given(st.lists(_step, min_size=1, max_size=40), st.floats(0.0, 1.0), st.floats(0.0, 1.0))
def test_property_an_added_success_never_increases_it(
    steps: list[tuple[float, float, bool]], where: float, duration: float
):
    ops = _sequential(steps)
    ok_ends = [op.t_end for op in ops if op.ok]
    # Anywhere from the first success (or the first attempt) to the last attempt's end.
    lo = ok_ends[0] if ok_ends else ops[0].t_start
    t_end = lo + where * (ops[-1].t_end - lo)
    before = unavailable_s(ops, "write")
    after = unavailable_s([*ops, attempt(t_end - duration, t_end)], "write")
    assert before is not None and after is not None
    assert after <= before + 1e-9
