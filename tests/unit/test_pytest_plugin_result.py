"""The plugin's RunResult on hand-made results: metrics as attributes and assert_slo's message.
(tests/e2e/test_pytest_plugin.py runs the plugin itself in pytest sessions of its own.)"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from rsdrill.pytest_plugin import RunResult
from rsdrill.result import (
    EXIT_CODES,
    Latency,
    Metrics,
    Result,
    SloResult,
    Stall,
    StalledGap,
    TargetInfo,
)


def run_result(verdict: str, slo: list[SloResult], error: str | None = None) -> RunResult:
    result = Result(
        experiment="rs3-primary-kill",
        verdict=verdict,
        exit_code=EXIT_CODES[verdict],
        started_at="2024-05-01T02:00:00+00:00",
        duration_s=40.0,
        target=TargetInfo(platform="sandbox", topology="rs3", uri="mongodb://127.0.0.1:28017"),
        metrics=Metrics(write_unavailable_s=11.11, latency_ms=Latency(p99=12.5)),
        slo=slo,
        error=error,
    )
    return RunResult(result, Path("/results/run"))


def slo(metric: str, op: str, threshold: float, observed: float | None, passed: bool) -> SloResult:
    return SloResult(metric=metric, op=op, threshold=threshold, observed=observed, passed=passed)


def test_metrics_are_attributes() -> None:
    run = run_result("pass", [])
    assert run.write_unavailable_s == 11.11
    assert run.latency_ms.p99 == 12.5
    assert run.failover_s is None
    assert run.failover_parts.election_s is None
    assert run.report_path == Path("/results/run/report.html")
    assert {"write_unavailable_s", "latency_ms", "report_path"} <= set(dir(run))
    with pytest.raises(AttributeError, match=r"no attribute 'write_unavailable'.*metrics: "):
        _ = run.write_unavailable
    assert copy.deepcopy(run) == run


def test_assert_slo_passes_on_a_pass() -> None:
    run = run_result("pass", [slo("write_unavailable_s", "<=", 15, 11.11, True)])
    run.assert_slo()
    assert run.failure_message() is None


def test_assert_slo_names_each_failed_metric_threshold_observed_value_and_report() -> None:
    run = run_result(
        "fail",
        [
            slo("write_unavailable_s", "<=", 5, 11.11, False),
            slo("lost_acknowledged_writes", "==", 0, 0, True),
            slo("recovery_s.max", "<=", 30, None, False),
        ],
    )
    with pytest.raises(AssertionError) as raised:
        run.assert_slo()
    assert str(raised.value) == (
        "rsdrill experiment 'rs3-primary-kill': 2 of 3 SLOs failed\n"
        "  write_unavailable_s: observed 11.11, threshold <= 5\n"
        "  recovery_s.max: observed not measured, threshold <= 30\n"
        "report: /results/run/report.html"
    )


def test_assert_slo_says_when_this_process_stalled_over_the_gap() -> None:
    run = run_result("fail", [slo("write_unavailable_s", "<=", 5, 11.11, False)])
    run.result.metrics.probe_stalls = [Stall(at_s=4.0, seconds=2.0)]
    run.result.metrics.probe_stalled_gaps = [
        StalledGap(metric="write_unavailable_s", start_s=3.5, end_s=14.61, stalled_s=2.0,
                   stall_at_s=4.0),
    ]  # fmt: skip
    assert run.failure_message() == (
        "rsdrill experiment 'rs3-primary-kill': 1 of 1 SLOs failed\n"
        "  write_unavailable_s: observed 11.11, threshold <= 5\n"
        "probes: this process stalled 2.0 s at t=4.0 s; the write gap 3.5-14.6 s overlaps it: "
        "it may be this machine's, not the cluster's\n"
        "report: /results/run/report.html"
    )


@pytest.mark.parametrize("verdict", ["error", "aborted"])
def test_assert_slo_reports_a_run_that_did_not_finish(verdict: str) -> None:
    run = run_result(verdict, [], error="preflight: the replica set is not healthy")
    with pytest.raises(AssertionError) as raised:
        run.assert_slo()
    assert str(raised.value) == (
        f"rsdrill experiment 'rs3-primary-kill' ended {verdict}: "
        "preflight: the replica set is not healthy\n"
        "report: /results/run/report.html"
    )


@pytest.mark.parametrize("verdict", ["error", "aborted"])
def test_a_metric_a_run_that_did_not_finish_left_unmeasured_fails_with_its_error(
    verdict: str,
) -> None:
    run = run_result(verdict, [], error="no 3 consecutive free ports between 24000 and 24009")
    with pytest.raises(AssertionError) as raised:  # before: None, then a TypeError in `<=`
        assert run.failover_s <= 15  # type: ignore[operator]
    assert str(raised.value) == (
        f"failover_s not measured: rsdrill experiment 'rs3-primary-kill' ended {verdict}: "
        "no 3 consecutive free ports between 24000 and 24009\n"
        "report: /results/run/report.html"
    )
    assert run.write_unavailable_s == 11.11  # measured before it ended: there as it was
