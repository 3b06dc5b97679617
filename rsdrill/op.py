"""One probe attempt: the unit of a run's history (rsdrill/history.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Op:
    """One probe attempt.

    probe:   which probe ("write", "read", "ledger", "failover", "recovery", "lag", "load",
             "stall": rsdrill's own process woke up late, or a probe began an attempt late)
    op:      what it did ("insert", "find", "hello", "status", "read", "update", ...)
    member:  host:port that answered, when known
    outcome: "ok", "error" or "timeout"
    detail:  what the analyzers need: {"seq": 7}, {"writable": true}, {"state": "PRIMARY"},
             {"lag_s": {...}}, {"error": "...", "code": 10107}
    """

    probe: str
    op: str
    member: str | None
    t_start: float
    t_end: float
    outcome: str
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"
