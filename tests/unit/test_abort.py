"""Abort conditions: parsing, and the live metrics on histories written by hand."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rsdrill.analysis.abort import (
    METRICS,
    Breach,
    Condition,
    LiveFigures,
    first_breach,
    folded,
    parse_condition,
    unmeasurable,
)
from rsdrill.experiment.loader import ExperimentError, load_experiment_text
from rsdrill.experiment.probes import Probes
from rsdrill.history import Op


def op(probe: str, t_start: float, t_end: float, ok: bool = True, **detail: Any) -> Op:
    return Op(probe, "x", "h:1", t_start, t_end, "ok" if ok else "error", detail)


def poll(t: float, writable: bool, ok: bool = True) -> Op:
    return op("failover", t - 0.01, t, ok, writable=writable)


# -- parsing -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("no_primary_s > 60", Condition("no_primary_s", ">", 60)),
        ("write_unavailable_s>=2.5", Condition("write_unavailable_s", ">=", 2.5)),
        ("  probe_error_rate  >  0.5 ", Condition("probe_error_rate", ">", 0.5)),
        ("no_primary_s != 0", Condition("no_primary_s", "!=", 0)),
    ],
)
def test_conditions_parse(text: str, expected: Condition) -> None:
    assert parse_condition(text) == expected


def test_a_condition_reads_back_as_written() -> None:
    assert str(parse_condition("no_primary_s>60.0")) == "no_primary_s > 60"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("no_primary > 5", "unknown metric 'no_primary' in 'no_primary > 5'; did you mean "
                           "'no_primary_s'? (one of no_primary_s, write_unavailable_s, "
                           "probe_error_rate)"),
        ("failover_s > 5", "unknown metric 'failover_s' in 'failover_s > 5' (one of"),
        ("no_primary_s >> 5", "'no_primary_s >> 5': after the metric comes an operator"),
        ("no_primary_s >", "'no_primary_s >': after the metric comes an operator"),
        ("no_primary_s > soon", "'no_primary_s > soon': after the metric comes an operator"),
        ("no_primary_s > inf", "'no_primary_s > inf': after the metric comes an operator"),
        ("> 5", "'> 5' is not a condition like 'no_primary_s > 60'"),
        ("probe_error_rate > 50", "probe_error_rate is a share from 0 to 1"),
        ("no_primary_s > -1", "no_primary_s is in seconds; the threshold cannot be negative"),
    ],
)  # fmt: skip
def test_bad_conditions_say_what_is_wrong(text: str, problem: str) -> None:
    with pytest.raises(ValueError) as error:
        parse_condition(text)
    assert str(error.value).startswith(problem) or problem in str(error.value)


def test_a_condition_never_holds_on_an_unknown_value() -> None:
    condition = Condition("no_primary_s", "<", 5)
    assert condition.holds(1) and not condition.holds(None) and not condition.holds(5)


def test_a_metric_without_its_probe_is_unmeasurable() -> None:
    assert unmeasurable("no_primary_s", Probes().records()) is None
    assert unmeasurable("no_primary_s", Probes(failover=None).records()) == (
        "no_primary_s is measured by the failover probe (probes.failover), which is off"
    )
    no_writes = Probes(availability={"writes": False})
    assert unmeasurable("write_unavailable_s", no_writes.records()) is not None
    assert unmeasurable("probe_error_rate", no_writes.records()) is None
    bare = Probes(availability=None, durability=None)
    assert unmeasurable("probe_error_rate", bare.records()) is not None
    with_load = Probes(availability=None, durability=None, load={})
    assert unmeasurable("probe_error_rate", with_load.records()) is None


def test_the_experiment_file_points_at_a_bad_condition() -> None:
    text = (
        "name: x\ntarget: {platform: sandbox}\n"
        "faults:\n  - {at: 1s, kind: host-kill, duration: 1s}\n"
        "abort_on:\n  - write_unavailable_s > 30\n  - no_primary > 5\n"
    )
    with pytest.raises(ExperimentError) as error:
        load_experiment_text(text, "exp.yaml")
    assert str(error.value).startswith("exp.yaml:7:5: abort_on[1]: unknown metric 'no_primary'")


def test_the_experiment_file_refuses_a_condition_it_cannot_measure() -> None:
    text = (
        "name: x\ntarget: {platform: sandbox}\nprobes: {failover: null}\n"
        "faults:\n  - {at: 1s, kind: host-kill, duration: 1s}\n"
        "abort_on: [no_primary_s > 5]\n"
    )
    with pytest.raises(ExperimentError) as error:
        load_experiment_text(text, "exp.yaml")
    assert str(error.value) == (
        "exp.yaml:6:12: abort_on[0]: no_primary_s is measured by the failover probe "
        "(probes.failover), which is off"
    )


def test_guards_and_abort_on_load_from_a_file() -> None:
    exp = load_experiment_text(
        "name: x\ntarget: {platform: sandbox}\n"
        "faults:\n  - {at: 1s, kind: host-kill, duration: 1s}\n"
        "guards: {allow_quorum_loss: true, max_lag_before_start: 500ms}\n"
        "abort_on: ['no_primary_s > 30']\n"
    )
    assert exp.guards.allow_quorum_loss and not exp.guards.allow_oplog_overrun
    assert exp.guards.max_lag_before_start == 0.5
    assert exp.abort_on == ("no_primary_s > 30",)


# -- live metrics --------------------------------------------------------------------------------


def no_primary_s(ops: list[Op], now: float) -> float | None:
    return folded(ops, now).no_primary_s(now)


def write_unavailable_s(ops: list[Op], now: float) -> float | None:
    return folded(ops, now).write_unavailable_s(now)


def probe_error_rate(ops: list[Op], now: float) -> float | None:
    return folded(ops, now).probe_error_rate(now)


def test_a_gap_runs_from_the_last_success_to_now() -> None:
    attempts = [op("write", 0.0, 0.1), op("write", 0.2, 0.3), op("write", 0.4, 0.6, ok=False)]
    assert write_unavailable_s(attempts, now=2.0) == pytest.approx(1.7)
    assert write_unavailable_s([], now=2.0) is None


def test_with_no_success_yet_the_gap_runs_from_the_first_attempt() -> None:
    attempts = [op("write", 0.7, 0.8, ok=False), op("write", 0.5, 0.6, ok=False)]
    assert write_unavailable_s(attempts, now=2.0) == pytest.approx(1.5)


def test_no_primary_counts_from_the_last_writable_poll_of_any_member() -> None:
    ops = [
        poll(1.0, writable=True),
        poll(1.1, writable=False),  # a secondary: there still is a primary
        op("write", 1.0, 1.2),  # other probes do not count
        poll(1.3, writable=False, ok=False),
        poll(1.5, writable=False),
    ]
    assert no_primary_s(ops, now=1.6) == pytest.approx(0.6)
    assert no_primary_s([op("write", 0, 1)], now=2) is None


def test_a_quiet_primary_between_its_awaited_answers_is_no_gap() -> None:
    """The primary's stream answers once per max_await while nothing changes: its latest answer
    said writable, so there is a primary however long ago that answer ended; once its stream
    breaks (a kill), the gap counts from its last writable answer."""

    def hello(member: str, t_start: float, t_end: float, writable: bool, ok: bool = True) -> Op:
        return Op("failover", "hello", member, t_start, t_end, "ok" if ok else "error",
                  {"writable": writable})  # fmt: skip

    quiet = [hello("p:1", 0.0, 0.5, True), hello("s:2", 0.0, 0.5, False),
             hello("s:2", 0.5, 1.0, False)]  # fmt: skip
    assert no_primary_s(quiet, now=1.4) == 0.0
    broken = [*quiet, hello("p:1", 0.5, 1.1, False, ok=False)]
    assert no_primary_s(broken, now=1.4) == pytest.approx(0.9)
    # A break that says the member held its writable state until then counts from the break.
    held = [*quiet, Op("failover", "hello", "p:1", 0.5, 1.1, "error", {"held_writable": True})]
    assert no_primary_s(held, now=1.4) == pytest.approx(0.3)


def test_write_unavailable_counts_from_the_last_successful_write() -> None:
    ops = [op("write", 0, 1.0), op("ledger", 0, 1.9), op("write", 1.0, 1.25, ok=False)]
    assert write_unavailable_s(ops, now=2.0) == pytest.approx(1.0)


def test_error_rate_is_over_the_client_probes_in_the_last_ten_seconds() -> None:
    old_failures = [op("write", t, t + 0.01, ok=False) for t in range(0, 5)]
    recent = [op(p, t, t + 0.01) for t in range(10, 20) for p in ("write", "read")]
    recent_failures = [op("ledger", 18, 18.5, ok=False) for _ in range(5)]
    ignored = [op(p, 19, 19.1, ok=False) for p in ("failover", "recovery", "lag")] + [
        Op("ledger", "readback", None, 19, 19.5, "error", {})
    ]
    ops = old_failures + recent + recent_failures + ignored
    assert probe_error_rate(ops, now=19.5) == pytest.approx(5 / 25)


def test_error_rate_needs_enough_attempts() -> None:
    ops = [op("write", t / 10, t / 10 + 0.01, ok=False) for t in range(19)]
    assert probe_error_rate(ops, now=2.0) is None
    assert probe_error_rate([*ops, op("write", 1.9, 1.95, ok=False)], now=2.0) == 1.0


def test_the_first_condition_that_holds_is_the_breach() -> None:
    ops = [poll(1.0, writable=True), op("write", 0.5, 1.0)]
    conditions = [
        parse_condition("probe_error_rate > 0.1"),  # unknown: too few attempts
        parse_condition("no_primary_s > 5"),
        parse_condition("write_unavailable_s > 0.75"),
        parse_condition("no_primary_s > 0.5"),
    ]
    breach = first_breach(conditions, folded(ops, 2.0), now=2.0)
    assert breach == Breach(conditions[2], 1.0)
    assert breach.message() == (
        "abort condition `write_unavailable_s > 0.75` held: write_unavailable_s was 1"
    )
    assert first_breach(conditions, folded(ops, 1.2), now=1.2) is None


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["failover", "write", "read", "ledger", "recovery"]),
            st.floats(0, 60),
            st.floats(0, 2),
            st.booleans(),
            st.booleans(),
            st.sampled_from(["a:1", "b:2", None]),
        ),
        max_size=60,
    ),
    st.lists(st.integers(1, 10), min_size=1, max_size=8),
)
def test_ops_taken_as_they_come_give_the_figures_of_the_whole_history(
    drawn: list[tuple[str, float, float, bool, bool, str | None]], chunks: list[int]
) -> None:
    """The stop watch folds in each quarter second's new ops, in the order they ended, with the
    time of each check: every figure is then the one of all the ops so far, read at once."""
    ops = sorted(
        (Op(probe, "x", member, start, start + length, "ok" if ok else "error",
            {"writable": flag} if probe == "failover" else {})
         for probe, start, length, ok, flag, member in drawn),
        key=lambda o: o.t_end,
    )  # fmt: skip
    live, taken, now = LiveFigures(), 0, 0.0
    for size in chunks * (len(ops) // max(sum(chunks), 1) + 1):
        new = ops[taken : taken + size]
        taken += len(new)
        now = max([now, *(o.t_end for o in new)])
        live.take(new, now)
    live.take(ops[taken:], now)
    end = now + 0.5
    whole = folded(ops, end)
    for metric in METRICS:
        assert live.measure(metric, end) == whole.measure(metric, end), metric
