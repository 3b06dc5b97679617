"""Abort conditions: stop a run whose damage goes beyond what the experiment may cause.

A condition reads `METRIC OP NUMBER`, e.g. `no_primary_s > 60`, with the SLO operators
(`<=, <, >=, >, ==, !=`). It is given in the experiment's `abort_on:` list or with
`rsdrill run --abort-on`. While the probes run, the runner evaluates every condition every
0.25 s on the history so far; the first that holds stops the run (no further fault is
injected, every fault in force is reverted, verdict aborted, exit 3).

The metrics, evaluated at the moment `now` (seconds on the run's clock):

- `no_primary_s`: the current stretch without a writable primary: 0 while some member's latest
  failover answer says writable (its awaited hello pending), else `now` minus the end of the last
  failover poll that found a member writable (the failover probe);
- `write_unavailable_s`: the current stretch without a successful write: `now` minus the end
  of the last successful "write" op (the availability probe's writes);
- `probe_error_rate`: the share of failed attempts of the client-side probes ("write", "read",
  "ledger", "load": what an application sees) among those that ended in the last 10 s, from 0
  to 1. The per-member pollers are left out: the polls of a member that a fault took down fail
  by design.

A stretch starts at the probe's first attempt when nothing succeeded yet. A metric with too
little data (no attempt yet; fewer than 20 attempts in the error-rate window) is unknown, and
an unknown metric never aborts a run. Everything here is pure: no clock, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rsdrill.analysis.failover import writable
from rsdrill.analysis.slo import compare
from rsdrill.analysis.slo import parse_condition as parse_comparison
from rsdrill.analysis.sources import CLIENT_PROBES, missing_source
from rsdrill.history import Op
from rsdrill.suggest import did_you_mean

CHECK_INTERVAL_S = 0.25
"""How often the runner evaluates the conditions."""
ERROR_RATE_WINDOW_S = 10.0
ERROR_RATE_MIN_ATTEMPTS = 20
"""Fewer attempts in the window give no rate: a probe warming up must not abort the run."""

METRICS: tuple[str, ...] = ("no_primary_s", "write_unavailable_s", "probe_error_rate")
"""The metrics a condition may name (what each is measured by: analysis/sources.py)."""

_CONDITION = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.]*)\s*(.*)$")


@dataclass(frozen=True)
class Condition:
    """A parsed abort condition."""

    metric: str
    op: str
    threshold: float

    def __str__(self) -> str:
        return f"{self.metric} {self.op} {self.threshold:g}"

    def holds(self, value: float | None) -> bool:
        """True when the observed value satisfies the condition (never for an unknown one)."""
        return compare(value, self.op, self.threshold)


@dataclass(frozen=True)
class Breach:
    """A condition that held, and the value that made it hold."""

    condition: Condition
    observed: float

    def message(self) -> str:
        return (
            f"abort condition `{self.condition}` held: "
            f"{self.condition.metric} was {self.observed:.3g}"
        )


def parse_condition(text: str) -> Condition:
    """`"no_primary_s > 60"` → Condition; ValueError with a readable message otherwise."""
    if not isinstance(text, str):
        raise ValueError(f"an abort condition is a text like 'no_primary_s > 60', not {text!r}")
    match = _CONDITION.match(text)
    if match is None:
        raise ValueError(
            f"{text!r} is not a condition like 'no_primary_s > 60' (a metric, an operator "
            "and a number)"
        )
    metric, rest = match.groups()
    if metric not in METRICS:
        guess = did_you_mean(metric, METRICS)
        hint = f"did you mean '{guess}'? " if guess else ""
        raise ValueError(
            f"unknown metric {metric!r} in {text!r}; {hint}(one of {', '.join(METRICS)})"
        )
    try:
        op, threshold = parse_comparison(rest)
    except ValueError:
        raise ValueError(
            f"{text!r}: after the metric comes an operator (<=, <, >=, >, ==, !=) and a "
            "number, e.g. 'no_primary_s > 60'"
        ) from None
    if metric == "probe_error_rate" and not 0 <= threshold <= 1:
        raise ValueError(f"{text!r}: probe_error_rate is a share from 0 to 1, e.g. 0.5")
    if threshold < 0:
        raise ValueError(f"{text!r}: {metric} is in seconds; the threshold cannot be negative")
    return Condition(metric, op, threshold)


def unmeasurable(metric: str, records: set[str] | frozenset[str]) -> str | None:
    """Why `metric` cannot be measured by probes recording `records` (a condition on it could
    never hold); None when it can."""
    source = missing_source(metric, records)
    return None if source is None else f"{metric} is measured by {source.what}, which is off"


def current_gap(
    attempts: Sequence[Op], succeeded: Callable[[Op], bool], now: float
) -> float | None:
    """Seconds from the last successful attempt's end to `now`.

    From the first attempt's start when none succeeded; None without attempts.
    """
    if not attempts:
        return None
    ok_ends = [op.t_end for op in attempts if succeeded(op)]
    since = max(ok_ends) if ok_ends else min(op.t_start for op in attempts)
    return max(now - since, 0.0)


def no_primary_s(ops: Sequence[Op], now: float) -> float | None:
    """The current stretch in which no failover poll found a writable member. A member whose
    latest answer said writable is the primary still: its stream's next hello is pending, and
    an awaited hello answers at once when the member changes (or breaks when it dies), so a
    quiet primary is not a gap of max_await between its answers."""
    polls = [op for op in ops if op.probe == "failover"]
    latest: dict[str | None, Op] = {}
    for op in polls:
        if op.member not in latest or op.t_end >= latest[op.member].t_end:
            latest[op.member] = op
    if any(writable(op) for op in latest.values()):
        return 0.0
    # A stream broken by a connection error held its writable state until the break.
    return current_gap(polls, lambda op: writable(op) or op.detail.get("held_writable") is True,
                       now)  # fmt: skip


def write_unavailable_s(ops: Sequence[Op], now: float) -> float | None:
    """The current stretch without a successful "write" op."""
    return current_gap([op for op in ops if op.probe == "write"], lambda op: op.ok, now)


def probe_error_rate(ops: Sequence[Op], now: float) -> float | None:
    """Failed share of the client-side probes' attempts that ended in the last 10 s.

    None with fewer than `ERROR_RATE_MIN_ATTEMPTS` such attempts. The ledger's final readback
    is not an attempt of the measured window and is left out.
    """
    recent = [
        op
        for op in ops
        if op.probe in CLIENT_PROBES.records
        and op.op != "readback"
        and now - ERROR_RATE_WINDOW_S <= op.t_end <= now
    ]
    if len(recent) < ERROR_RATE_MIN_ATTEMPTS:
        return None
    return sum(1 for op in recent if not op.ok) / len(recent)


_MEASURES: dict[str, Callable[[Sequence[Op], float], float | None]] = {
    "no_primary_s": no_primary_s,
    "write_unavailable_s": write_unavailable_s,
    "probe_error_rate": probe_error_rate,
}


def measure(metric: str, ops: Sequence[Op], now: float) -> float | None:
    """The live value of `metric` (one of `METRICS`) at `now`."""
    return _MEASURES[metric](ops, now)


def first_breach(conditions: Sequence[Condition], ops: Sequence[Op], now: float) -> Breach | None:
    """The first condition, in the order given, that holds at `now`; None if none does."""
    for condition in conditions:
        value = measure(condition.metric, ops, now)
        if value is not None and condition.holds(value):
            return Breach(condition, value)
    return None
