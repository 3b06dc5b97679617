"""SLO names, conditions, observed values and verdicts."""

from __future__ import annotations

import pytest

from rsdrill.analysis.slo import (
    evaluate,
    known_metric,
    metric_names,
    observed_value,
    parse_condition,
    verdict,
)
from rsdrill.result import FailoverParts, Latency, Metrics, SloResult

A, B = "a:27017", "b:27017"


def test_metric_names_are_the_contract_names() -> None:
    assert metric_names() == [
        "write_unavailable_s",
        "read_unavailable_s",
        "raw_write_unavailable_s",
        "driver_write_delay_s",
        "failover_s",
        "failover_parts.detection_s",
        "failover_parts.election_s",
        "failover_parts.client_rediscovery_s",
        "recovery_s.max",
        "replication_lag_max_s",
        "acknowledged_writes",
        "lost_acknowledged_writes",
        "duplicated_writes",
        "latency_ms.p50",
        "latency_ms.p95",
        "latency_ms.p99",
        "latency_ms.max",
        "degradation_s",
        "no_primary_s",
        "rto_s",
        "rpo_s",
        "restore_s",
        "lost_before_backup",
        "probe_stall_s",
        "divergent_members",
        "audit_lag_s",
        "validate_errors",
        "rolled_back_writes",
        "rolled_back_acknowledged_writes",
        "transaction_anomalies",
        "causal_violations",
    ]


@pytest.mark.parametrize(
    ("name", "known"),
    [
        ("write_unavailable_s", True),
        ("latency_ms.p99", True),
        ("recovery_s.max", True),
        ("recovery_s.a:27017", True),
        ("recovery_s.mongo-0.mongo.svc.cluster.local:27017", True),
        ("recovery_s.[::1]:27017", True),
        ("recovery_s.a", False),
        ("recovery_s.", False),
        ("recovery_s", False),
        ("latency_ms", False),
        ("failover_parts", False),
        ("write_unavailable", False),
        ("member_states", False),
    ],
)
def test_known_metric(name: str, known: bool) -> None:
    assert known_metric(name) is known


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("<= 15", ("<=", 15.0)),
        ("<15", ("<", 15.0)),
        ("  >=0.5  ", (">=", 0.5)),
        ("> 1e3", (">", 1000.0)),
        ("== 0", ("==", 0.0)),
        ("!= -1", ("!=", -1.0)),
    ],
)
def test_parse_condition(text: str, parsed: tuple[str, float]) -> None:
    assert parse_condition(text) == parsed


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("15", "must be an operator"),
        ("=< 3", "must be an operator"),
        ("", "must be an operator"),
        ("<= 1 2", "must be an operator"),
        ("<= abc", "'abc' is not a number"),
        ("<= inf", "finite"),
        ("<= nan", "finite"),
    ],
)
def test_parse_condition_rejects(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_condition(text)


def metrics() -> Metrics:
    return Metrics(
        write_unavailable_s=10.4,
        failover_s=9.955,
        failover_parts=FailoverParts(detection_s=7.0, election_s=2.955),
        recovery_s={A: 1.5, B: 61.0},
        acknowledged_writes=187,
        lost_acknowledged_writes=0,
        latency_ms=Latency(p50=4.0, p99=5.0),
    )


def test_observed_values() -> None:
    m = metrics()
    assert observed_value(m, "write_unavailable_s") == 10.4
    assert observed_value(m, "read_unavailable_s") is None
    assert observed_value(m, "failover_parts.election_s") == 2.955
    assert observed_value(m, "failover_parts.client_rediscovery_s") is None
    assert observed_value(m, "latency_ms.p99") == 5.0
    assert observed_value(m, "latency_ms.max") is None
    assert observed_value(m, "acknowledged_writes") == 187.0
    assert observed_value(m, "lost_acknowledged_writes") == 0.0
    assert observed_value(m, "recovery_s.max") == 61.0
    assert observed_value(m, "recovery_s.a:27017") == 1.5
    assert observed_value(m, "recovery_s.c:27017") is None


def test_recovery_max_is_none_when_a_member_never_recovered_or_none_was_reverted() -> None:
    assert observed_value(Metrics(recovery_s={A: 1.5, B: None}), "recovery_s.max") is None
    assert observed_value(Metrics(), "recovery_s.max") is None


def test_observed_value_rejects_unknown_names() -> None:
    with pytest.raises(ValueError, match="unknown metric 'member_states'"):
        observed_value(Metrics(), "member_states")


def test_evaluate_in_order_and_unmeasured_fails() -> None:
    slo = {
        "write_unavailable_s": "<= 15",
        "failover_s": "< 9.9",
        "lost_acknowledged_writes": "== 0",
        "read_unavailable_s": "<= 100",
        "recovery_s.max": "<= 61",
    }
    results = evaluate(metrics(), slo)
    assert results == [
        SloResult(
            metric="write_unavailable_s", op="<=", threshold=15.0, observed=10.4, passed=True
        ),
        SloResult(metric="failover_s", op="<", threshold=9.9, observed=9.955, passed=False),
        SloResult(
            metric="lost_acknowledged_writes", op="==", threshold=0.0, observed=0.0, passed=True
        ),
        SloResult(
            metric="read_unavailable_s", op="<=", threshold=100.0, observed=None, passed=False
        ),
        SloResult(metric="recovery_s.max", op="<=", threshold=61.0, observed=61.0, passed=True),
    ]
    assert results[0].model_dump(by_alias=True)["pass"] is True
    assert verdict(results) == "fail"
    assert verdict(results[:1] + results[2:3]) == "pass"


@pytest.mark.parametrize(
    ("condition", "passed"),
    [("> 10.4", False), (">= 10.4", True), ("!= 10.4", False), ("!= 10", True), ("< 11", True)],
)
def test_each_operator(condition: str, passed: bool) -> None:
    [result] = evaluate(metrics(), {"write_unavailable_s": condition})
    assert result.passed is passed


def test_no_slo_passes() -> None:
    assert evaluate(metrics(), {}) == []
    assert verdict([]) == "pass"


def test_evaluate_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="unknown metric"):
        evaluate(metrics(), {"bogus": "<= 1"})
    with pytest.raises(ValueError, match="must be an operator"):
        evaluate(metrics(), {"failover_s": "fast"})


def test_every_slo_metric_says_what_measures_it() -> None:
    from rsdrill.analysis.sources import SOURCES, missing_source

    assert set(metric_names()) <= set(SOURCES)
    assert missing_source("recovery_s.127.0.0.1:27017", {"recovery"}) is None
    missing = missing_source("recovery_s.127.0.0.1:27017", {"write"})
    assert missing is not None and "probes.recovery" in missing.what
