"""A hand-built run for the report tests: an rs3 primary killed at 5 s and restarted at 20 s.

Writes fail from 5 s to 15 s (the election), the killed member is DOWN until its restart, goes
through STARTUP2 and RECOVERING and is SECONDARY at 27 s; a secondary lags after the restart;
a load generator's latency rises while the set recovers. Deterministic (seeded), no server.
"""

from __future__ import annotations

import random

from rsdrill.history import Op
from rsdrill.result import (
    FailoverParts,
    FaultResult,
    Latency,
    Metrics,
    Result,
    SloResult,
    TargetInfo,
)

MEMBERS = ["127.0.0.1:28017", "127.0.0.1:28018", "127.0.0.1:28019"]
KILLED, NEW_PRIMARY, OTHER = MEMBERS
DURATION_S = 40.0
KILL_S, WRITES_BACK_S, RESTART_S, SECONDARY_S = 5.0, 15.0, 20.0, 27.0
ELECTED_S = 14.9
MEMBER_STATES: dict[str, list[tuple[float, str]]] = {
    KILLED: [
        (0.0, "PRIMARY"),
        (KILL_S, "DOWN"),
        (RESTART_S, "STARTUP2"),
        (24.0, "RECOVERING"),
        (SECONDARY_S, "SECONDARY"),
    ],
    NEW_PRIMARY: [(0.0, "SECONDARY"), (ELECTED_S, "PRIMARY")],
    OTHER: [(0.0, "SECONDARY")],
}


def sample_result(experiment: str = "rs3-primary-kill", error: str | None = None) -> Result:
    """The run's result: one SLO fails (write_unavailable_s <= 8), so the verdict is fail."""
    slo = [
        SloResult(metric="write_unavailable_s", op="<=", threshold=8, observed=10.02, passed=False),
        SloResult(metric="failover_s", op="<=", threshold=12.7, observed=9.87, passed=True),
        SloResult(metric="lost_acknowledged_writes", op="==", threshold=0, observed=0, passed=True),
    ]
    return Result(
        experiment=experiment,
        verdict="error" if error else "fail",
        exit_code=4 if error else 1,
        started_at="2025-01-02T03:04:05Z",
        duration_s=DURATION_S,
        target=TargetInfo(
            platform="sandbox", topology="rs3", uri="mongodb://127.0.0.1:28017/", members=MEMBERS
        ),
        faults=[
            FaultResult(
                kind="host-kill",
                target=KILLED,
                due_at_s=KILL_S - 0.002,
                injected_at_s=KILL_S,
                verified_at_s=KILL_S + 0.01,
                reverted_at_s=RESTART_S,
            )
        ],
        metrics=Metrics(
            write_unavailable_s=10.02,
            read_unavailable_s=1.5,
            failover_s=9.87,
            failover_parts=FailoverParts(
                detection_s=8.1, election_s=1.6, client_rediscovery_s=0.17
            ),
            recovery_s={KILLED: SECONDARY_S - RESTART_S, NEW_PRIMARY: None, OTHER: None},
            member_states=MEMBER_STATES,
            replication_lag_max_s=2.4,
            acknowledged_writes=1520,
            lost_acknowledged_writes=0,
            latency_ms=Latency(p50=2.1, p95=6.3, p99=48.0, max=2500.0),
            degradation_s=6.5,
        ),
        slo=slo,
        error=error,
        rsdrill_version="0.1.0",
    )


def _loop(probe: str, op: str, interval: float, outcome_at, latency_at) -> list[Op]:
    """A probe loop: one attempt every `interval` s over the run; callables shape each attempt."""
    ops = []
    t = 0.0
    while t < DURATION_S - 0.5:
        outcome, member = outcome_at(t)
        latency = latency_at(t, outcome)
        detail = {} if outcome == "ok" else {"error": "not primary", "code": 10107}
        ops.append(Op(probe, op, member, round(t, 4), round(t + latency, 4), outcome, detail))
        t += latency + interval
    return ops


def _write_outcome(t: float) -> tuple[str, str | None]:
    if t < KILL_S:
        return "ok", KILLED
    if t < WRITES_BACK_S:
        # The driver times out against the dead primary first, then gets errors.
        return ("timeout" if t < 6.0 else "error"), None
    return "ok", NEW_PRIMARY


def _state_at(member: str, t: float) -> str:
    """The member's state at `t`, from the result's member_states (the recovery probe's truth)."""
    return [state for start, state in MEMBER_STATES[member] if start <= t][-1]


def _member_polls(member: str, t: float) -> list[Op]:
    """The failover probe's hello and the recovery probe's status poll of `member` at `t`."""
    state = _state_at(member, t)
    if state == "DOWN":
        failed = {"error": "timed out"}
        return [
            Op("failover", "hello", member, t, t + 0.2, "timeout", failed),
            Op("recovery", "status", member, t, t + 0.2, "timeout", failed),
        ]
    primary = KILLED if t < KILL_S else NEW_PRIMARY if t >= ELECTED_S else None
    hello = {"writable": state == "PRIMARY", "secondary": state == "SECONDARY", "primary": primary}
    return [
        Op("failover", "hello", member, t, t + 0.002, "ok", hello),
        Op("recovery", "status", member, t, t + 0.002, "ok", {"state": state}),
    ]


def _lag_polls(peak_s: float) -> list[Op]:
    """The lag probe every 0.5 s: the restarted member lags up to `peak_s` while it catches up;
    while it is down the primary reports no lag for it."""
    ops = []
    scale = peak_s / 2.4
    for half in range(int(DURATION_S * 2)):
        t = half / 2
        lags = {OTHER: 0.04 * scale}
        if _state_at(KILLED, t) != "DOWN":
            lag = 2.4 * max(0.0, 1 - abs(t - 25) / 4) if t >= RESTART_S else 0.05
            lags[KILLED] = round(lag * scale, 6)
        detail = {"lag_s": lags}
        ops.append(Op("lag", "status", NEW_PRIMARY, t, t + 0.003, "ok", detail))
    return ops


def sample_ops(load_ops: int = 6000, seed: int = 7, lag_peak_s: float = 2.4) -> list[Op]:
    """Every probe's attempts over the run, `load_ops` of them from the load generator; the
    largest replication lag is `lag_peak_s`."""
    rng = random.Random(seed)

    def fast(t: float, outcome: str) -> float:
        return 0.25 if outcome == "timeout" else rng.uniform(0.001, 0.004)

    ops = _loop("write", "insert", 0.02, _write_outcome, fast)
    ops += _loop(
        "read",
        "find",
        0.02,
        lambda t: ("error", None) if KILL_S <= t < KILL_S + 1.5 else ("ok", NEW_PRIMARY),
        fast,
    )
    ops += _loop("ledger", "insert", 0.05, _write_outcome, fast)
    ops.append(Op("ledger", "readback", NEW_PRIMARY, 38.0, 38.2, "ok", {"found": 1520}))

    for member in MEMBERS:
        for tenth in range(0, int(DURATION_S * 10), 2):
            t = tenth / 10
            ops += _member_polls(member, t)
    ops += _lag_polls(lag_peak_s)
    for _ in range(load_ops):
        t = rng.uniform(0.0, DURATION_S - 0.5)
        kind = rng.choice(["read", "update", "update", "insert"])
        if KILL_S <= t < WRITES_BACK_S and kind != "read":
            outcome = rng.choice(["error", "error", "timeout"])
        else:
            outcome = "ok"
        base = 0.002 if t < RESTART_S else 0.002 + 0.02 * max(0.0, 1 - (t - RESTART_S) / 8)
        latency = 1.0 if outcome == "timeout" else rng.lognormvariate(0, 0.6) * base
        ops.append(Op("load", kind, NEW_PRIMARY, round(t, 4), round(t + latency, 4), outcome, {}))
    ops.sort(key=lambda op: op.t_end)
    return ops
