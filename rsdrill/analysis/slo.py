"""SLO assertions: which metrics can be asserted, how a condition reads, and the verdict.

An experiment's `slo:` maps a metric name to a condition such as `"<= 15"`. Names are the
result's metric names; nested ones are dotted (`failover_parts.election_s`, `latency_ms.p99`),
and `recovery_s.<host:port>` names one member's recovery time while `recovery_s.max` is the
slowest member's. A metric that could not be measured (null) fails its SLO: an SLO is a promise
the run must demonstrate, not one it may skip.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

from rsdrill.analysis.sources import CHECK_METRIC_PREFIX, RECOVERY_PREFIX
from rsdrill.result import CheckFigures, Metrics, SetFigures, SloResult
from rsdrill.suggest import did_you_mean

_METRIC_NAMES: tuple[str, ...] = (
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
)

_OPERATORS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le,
    "<": operator.lt,
    ">=": operator.ge,
    ">": operator.gt,
    "==": operator.eq,
    "!=": operator.ne,
}

# Two-character operators first, so "<= 5" is not read as "<" followed by "= 5".
_CONDITION = re.compile(r"^\s*(<=|>=|==|!=|<|>)\s*(\S+)\s*$")
_MEMBER = re.compile(r"^\S+:\d{1,5}$")
_CHECK_METRIC = re.compile(
    rf"^{re.escape(CHECK_METRIC_PREFIX)}[A-Za-z0-9_-]+\.({'|'.join(CheckFigures.model_fields)})$"
)


# A sharded target's figures of one set: `shards.<name>.<figure>`, `config_servers.<figure>`.
SET_METRIC = re.compile(
    rf"^(?:shards\.([A-Za-z0-9_-]+)|config_servers)\.({'|'.join(SetFigures.model_fields)})$"
)


# What a server without a replica set cannot have: no failover, no election, no replication.
REPLICA_SET_ONLY: tuple[str, ...] = (
    "failover_s",
    "failover_parts.detection_s",
    "failover_parts.election_s",
    "failover_parts.client_rediscovery_s",
    "replication_lag_max_s",
    "divergent_members",
    "audit_lag_s",
    "rolled_back_writes",
    "rolled_back_acknowledged_writes",
)


def not_applicable_reason(name: str, *, standalone: bool) -> str | None:
    """Why an SLO on `name` cannot be measured on this topology (None: it can)."""
    if standalone and name in REPLICA_SET_ONLY:
        return f"{name} needs a replica set: a standalone server has no failover or replication"
    return None


def metric_names() -> list[str]:
    """The metric names an SLO may use, in the result's order (plus `recovery_s.<host:port>`)."""
    return list(_METRIC_NAMES)


def known_metric(name: str) -> bool:
    """True if `name` is one of `metric_names()`, `recovery_s.<host:port>` for any member, or
    `probe.<check>.<figure>` for a check of the user's own."""
    if name in _METRIC_NAMES or _CHECK_METRIC.match(name) or SET_METRIC.match(name):
        return True
    member = name.removeprefix(RECOVERY_PREFIX)
    return member != name and _MEMBER.match(member) is not None


def unknown_metric_problem(name: str) -> str | None:
    """What is wrong with `name` as an SLO metric, with a did-you-mean; None if it is known."""
    if known_metric(name):
        return None
    guess = did_you_mean(name, _METRIC_NAMES)
    if guess:
        return f"unknown metric; did you mean '{guess}'?"
    figures = "|".join(CheckFigures.model_fields)
    return (
        f"unknown metric (one of {', '.join(_METRIC_NAMES)}, recovery_s.<host:port>, "
        f"{CHECK_METRIC_PREFIX}<check>.{figures}, shards.<shard>.<figure>, "
        "config_servers.<figure>)"
    )


def compare(observed: float | None, op: str, threshold: float) -> bool:
    """Whether `observed op threshold` holds; never for an unmeasured (None) value."""
    return observed is not None and _OPERATORS[op](observed, threshold)


def parse_condition(text: str) -> tuple[str, float]:
    """Split a condition such as `"<= 15"` into its operator and finite threshold.

    Operators: `<=, <, >=, >, ==, !=`; the threshold is any finite number Python's `float`
    reads (`15`, `-0.5`, `1e3`). Raises ValueError naming what is wrong otherwise.
    """
    match = _CONDITION.match(text)
    if match is None:
        raise ValueError(
            f"condition {text!r} must be an operator (<=, <, >=, >, ==, !=) and a number, "
            'e.g. "<= 15"'
        )
    op, number = match.groups()
    try:
        threshold = float(number)
    except ValueError:
        raise ValueError(f"condition {text!r}: threshold {number!r} is not a number") from None
    if not math.isfinite(threshold):
        raise ValueError(f"condition {text!r}: threshold must be a finite number")
    return op, threshold


def observed_value(metrics: Metrics, name: str) -> float | None:
    """The value of metric `name` in `metrics`, or None when it was not measured.

    `recovery_s.max` is the largest member recovery time; None when no member was reverted or
    any reverted member never recovered. `recovery_s.<host:port>` is None for a member that was
    not reverted. Raises ValueError for a name `known_metric` rejects.
    """
    if not known_metric(name):
        raise ValueError(f"unknown metric {name!r}; known: {', '.join(_METRIC_NAMES)}")
    if name == "recovery_s.max":
        times = list(metrics.recovery_s.values())
        if not times or any(t is None for t in times):
            return None
        return max(t for t in times if t is not None)
    if name.startswith(RECOVERY_PREFIX):
        return metrics.recovery_s.get(name.removeprefix(RECOVERY_PREFIX))
    if name.startswith(CHECK_METRIC_PREFIX):
        check, figure = name.removeprefix(CHECK_METRIC_PREFIX).rsplit(".", 1)
        figures = metrics.probe.get(check)
        found = None if figures is None else getattr(figures, figure)
        return None if found is None else float(found)
    if (found := SET_METRIC.match(name)) is not None:
        shard, figure = found.groups()
        of_set = metrics.config_servers if shard is None else metrics.shards.get(shard)
        measured = None if of_set is None else getattr(of_set, figure)
        return None if measured is None else float(measured)
    value: Any = metrics
    for part in name.split("."):
        value = getattr(value, part)
    return None if value is None else float(value)


def evaluate(metrics: Metrics, slo: Mapping[str, str]) -> list[SloResult]:
    """One result per SLO, in the mapping's order; an unmeasured (None) metric fails.

    Raises ValueError for an unknown metric or a malformed condition (the experiment loader
    rejects both before anything runs).
    """
    results = []
    for name, condition in slo.items():
        op, threshold = parse_condition(condition)
        observed = observed_value(metrics, name)
        passed = compare(observed, op, threshold)
        results.append(
            SloResult(metric=name, op=op, threshold=threshold, observed=observed, passed=passed)
        )
    return results


def verdict(results: Iterable[SloResult]) -> Literal["pass", "fail"]:
    """The verdict of a run's SLOs: "pass" when every one held (or there are none), else "fail"."""
    return "pass" if all(r.passed for r in results) else "fail"
