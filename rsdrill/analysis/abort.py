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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

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
        hint = f"; did you mean '{guess}'?" if guess else ""
        raise ValueError(
            f"unknown metric {metric!r} in {text!r}{hint} (one of {', '.join(METRICS)})"
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


@dataclass
class Gap:
    """One probe's current stretch without success: the last success's end, else the first
    attempt's start (none yet: unknown)."""

    ok_end: float | None = None
    first_start: float | None = None

    def take(self, op: Op, succeeded: bool) -> None:
        if succeeded:
            self.ok_end = op.t_end if self.ok_end is None else max(self.ok_end, op.t_end)
        if self.first_start is None or op.t_start < self.first_start:
            self.first_start = op.t_start

    def seconds(self, now: float) -> float | None:
        since = self.ok_end if self.ok_end is not None else self.first_start
        return None if since is None else max(now - since, 0.0)


@dataclass
class LiveFigures:
    """What the live metrics need of the history so far, folded in as ops come (`take`), in any
    order: each check of a run of hours then costs the ops since the last one, not all of them
    (a copy and a scan of millions, four times a second)."""

    polls: Gap = field(default_factory=Gap)
    latest_poll: dict[str | None, Op] = field(default_factory=dict)
    writes: Gap = field(default_factory=Gap)
    client: list[Op] = field(default_factory=list)  # client-probe attempts of the last window

    def take(self, ops: Iterable[Op], now: float) -> None:
        for op in ops:
            if op.probe == "failover":
                # A stream broken by a connection error held its writable state until the break.
                self.polls.take(op, writable(op) or op.detail.get("held_writable") is True)
                latest = self.latest_poll.get(op.member)
                if latest is None or op.t_end >= latest.t_end:
                    self.latest_poll[op.member] = op
            elif op.probe == "write":
                self.writes.take(op, op.ok)
            # The ledger's final readback is not an attempt of the measured window.
            if op.probe in CLIENT_PROBES.records and op.op != "readback":
                self.client.append(op)
        self.client = [op for op in self.client if op.t_end >= now - ERROR_RATE_WINDOW_S]

    def no_primary_s(self, now: float) -> float | None:
        """The current stretch in which no failover poll found a writable member. A member whose
        latest answer said writable is the primary still: its stream's next hello is pending,
        and an awaited hello answers at once when the member changes (or breaks when it dies),
        so a quiet primary is not a gap of max_await between its answers."""
        if any(writable(op) for op in self.latest_poll.values()):
            return 0.0
        return self.polls.seconds(now)

    def write_unavailable_s(self, now: float) -> float | None:
        """The current stretch without a successful "write" op."""
        return self.writes.seconds(now)

    def probe_error_rate(self, now: float) -> float | None:
        """Failed share of the client-side probes' attempts that ended in the last 10 s; None
        with fewer than `ERROR_RATE_MIN_ATTEMPTS` such attempts."""
        recent = [op for op in self.client if now - ERROR_RATE_WINDOW_S <= op.t_end <= now]
        if len(recent) < ERROR_RATE_MIN_ATTEMPTS:
            return None
        return sum(1 for op in recent if not op.ok) / len(recent)

    def measure(self, metric: str, now: float) -> float | None:
        """The live value of `metric` (one of `METRICS`) at `now`."""
        measures = {"no_primary_s": self.no_primary_s,
                    "write_unavailable_s": self.write_unavailable_s,
                    "probe_error_rate": self.probe_error_rate}  # fmt: skip
        return measures[metric](now)


def folded(ops: Iterable[Op], now: float) -> LiveFigures:
    """The live figures of a whole history."""
    figures = LiveFigures()
    figures.take(ops, now)
    return figures


def first_breach(
    conditions: Sequence[Condition], figures: LiveFigures, now: float
) -> Breach | None:
    """The first condition, in the order given, that holds at `now`; None if none does."""
    for condition in conditions:
        value = figures.measure(condition.metric, now)
        if value is not None and condition.holds(value):
            return Breach(condition, value)
    return None
