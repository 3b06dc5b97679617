"""compute_metrics on whole hand-written runs: rs3 primary kill, rs1 restart, an empty run."""

from __future__ import annotations

from typing import Any

import pytest

from rsdrill.analysis.metrics import compute_metrics
from rsdrill.history import FaultRecord, Op
from rsdrill.result import FailoverParts, Latency, Metrics, Stall, StalledGap

A, B, C = "a:27017", "b:27017", "c:27017"


def ticks(start: float, stop: float, step: float = 0.1) -> list[float]:
    """Times every `step` s in [start, stop), rounded to the microsecond."""
    return [round(start + step * k, 6) for k in range(round((stop - start) / step))]


def op(probe: str, name: str, member: str | None, t: float, dur: float, detail: Any) -> Op:
    return Op(probe, name, member, t, round(t + dur, 6), "ok", detail)


def failed(probe: str, name: str, t: float, dur: float, member: str | None = None) -> Op:
    detail = {"error": "timed out", "code": None, "type": "NetworkTimeout"}
    return Op(probe, name, member, t, round(t + dur, 6), "timeout", detail)


def hello(member: str, t: float, writable: bool) -> Op:
    detail = {"writable": writable, "secondary": not writable, "primary": None}
    return op("failover", "hello", member, t, 0.01, detail)


def status(member: str, t: float, state: str, term: int, election: Any = None) -> Op:
    detail = {"state": state, "term": term} | ({"election": election} if election else {})
    return op("recovery", "status", member, t, 0.01, detail)


def flat(tree: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts and lists as one dict with dotted keys (pytest.approx wants it flat)."""
    if isinstance(tree, list | tuple):
        tree = dict(enumerate(tree)) if tree else "empty"
    if isinstance(tree, dict) and not tree:
        tree = "empty"
    if not isinstance(tree, dict):
        return {prefix.rstrip("."): tree}
    out: dict[str, Any] = {}
    for key, value in tree.items():
        out |= flat(value, f"{prefix}{key}.")
    return out


def rs3_primary_kill() -> list[Op]:
    """A is primary until killed at 5.0 (restarted at 20.0); B becomes primary (term 2)."""
    ops: list[Op] = []
    for seq, t in enumerate(ticks(1.0, 30.0)):
        down = 5.0 <= t < 15.3
        served = A if t < 5.0 else B
        ops.append(
            failed("write", "insert", t, 0.05)
            if down
            else op("write", "insert", served, t, 0.005, {"seq": seq})
        )
        ops.append(
            failed("ledger", "insert", t, 0.05)
            if down
            else op("ledger", "insert", served, t, 0.005, {"seq": seq})
        )
        ops.append(
            failed("read", "find", t, 0.05)
            if 5.0 <= t < 6.0
            else op("read", "find", C, t, 0.004, {})
        )
    ops.append(op("ledger", "readback", B, 30.5, 0.2, {"checked": 187, "missing": []}))
    ops += [hello(A, t, True) for t in ticks(1.0, 5.0)]
    ops += [failed("failover", "hello", t, 0.25, member=A) for t in ticks(5.0, 20.0)]
    ops += [hello(A, t, False) for t in ticks(20.5, 30.0)]
    ops += [hello(B, t, t >= 15.0) for t in ticks(1.0, 30.0)]
    ops += [hello(C, t, False) for t in ticks(1.0, 30.0)]
    first_election = {"term": 1, "called_s": 0.5, "new_term_s": 0.6, "majority_writable_s": 0.8}
    election = {"term": 2, "called_s": 12.0, "new_term_s": 12.3, "majority_writable_s": 14.9}
    for t in ticks(1.0, 30.0, 1.0):
        if t < 5.0:
            ops.append(status(A, t, "PRIMARY", 1, first_election))
        elif t <= 20.0:
            ops.append(failed("recovery", "status", t, 0.01, member=A))
        else:
            ops.append(status(A, t, "RECOVERING" if t == 21.0 else "SECONDARY", 2))
        ops.append(
            status(B, t, "SECONDARY", 1) if t < 15.0 else status(B, t, "PRIMARY", 2, election)
        )
        ops.append(status(C, t, "SECONDARY", 1 if t < 15.0 else 2))
        lags = {B: 0.1, C: 0.2} if t < 5.0 else {C: 0.5} | ({A: 3.0} if t == 22.0 else {})
        ops.append(op("lag", "status", A if t < 5.0 else B, t, 0.01, {"lag_s": lags}))
    return ops


def test_rs3_primary_kill() -> None:
    # rsdrill's own process stalled twice: 0.2 s before the fault, 1.5 s inside the write gap.
    stalls = [Op("stall", "wake", None, 2.0, 2.2, "timeout", {"late_s": 0.2}),
              Op("stall", "wake", None, 8.0, 9.5, "timeout", {"late_s": 1.5})]  # fmt: skip
    ops = rs3_primary_kill() + stalls
    fault = FaultRecord(0, "host-kill", A, injected_at_s=5.0, verified_at_s=5.3, reverted_at_s=20.0)
    metrics = compute_metrics(ops, [fault], duration_s=30.0)
    expected = Metrics(
        write_unavailable_s=15.305 - 4.905,
        read_unavailable_s=6.004 - 4.904,
        # B: last not-writable poll ended 14.91, first writable one started 15.0.
        failover_s=14.955 - 5.0,
        failover_parts=FailoverParts(
            detection_s=12.0 - 5.0,
            election_s=14.955 - 12.0,
            client_rediscovery_s=15.305 - 14.955,
        ),
        # A: RECOVERING poll ended 21.01, SECONDARY poll started 22.0.
        recovery_s={A: 21.505 - 20.0},
        member_states={
            A: [(1.01, "PRIMARY"), (5.01, "DOWN"), (21.01, "RECOVERING"), (22.01, "SECONDARY")],
            B: [(1.01, "SECONDARY"), (15.01, "PRIMARY")],
            C: [(1.01, "SECONDARY")],
        },
        replication_lag_max_s=3.0,
        acknowledged_writes=40 + 147,
        lost_acknowledged_writes=0,
        lost_acknowledged_seqs=[],
        # 280 reads of 4 ms and 187 writes of 5 ms; nearest rank 234 is a read.
        latency_ms=Latency(p50=4.0, p95=5.0, p99=5.0, max=5.0),
        degradation_s=0.0,
        # A's last writable poll ended 4.91, B's first 15.01.
        no_primary_s=15.01 - 4.91,
        # 290 x 3 (write, ledger, read) + 1 readback + 285 + 290 + 290 hellos + 29 x 4 polls.
        probe_ops_per_s=(870 + 1 + 865 + 116) / 30.0,
        probe_ops_per_s_by_probe={
            "failover": 865 / 30,
            "lag": 29 / 30,
            "ledger": 291 / 30,
            "read": 290 / 30,
            "recovery": 87 / 30,
            "write": 290 / 30,
        },
        # The stalls sent nothing: not in the probes' load above.
        probe_stall_s=1.5,
        probe_stalls=[Stall(at_s=8.0, seconds=1.5), Stall(at_s=2.0, seconds=0.2)],
        probe_stalled_gaps=[
            StalledGap(
                metric="write_unavailable_s",
                start_s=4.905,
                end_s=15.305,
                stalled_s=1.5,
                stall_at_s=8.0,
            ),
        ],
    )
    assert flat(metrics.model_dump()) == pytest.approx(flat(expected.model_dump()))
    assert len(ops) == 1854


def rs1_restart() -> list[Op]:
    """One member, killed at 5.0 and restarted 30 s later at 35.0; writable again at 36.2."""
    ops: list[Op] = []
    for seq, t in enumerate(ticks(1.0, 40.0)):
        ops.append(
            failed("write", "insert", t, 0.05)
            if 5.0 <= t < 36.3
            else op("write", "insert", A, t, 0.005, {"seq": seq})
        )
        ops.append(
            hello(A, t, True) if t < 5.0 or t >= 36.2 else failed("failover", "hello", t, 0.05, A)
        )
    for t in ticks(1.0, 40.0, 1.0):
        up = t < 5.0 or t >= 37.0
        ops.append(status(A, t, "PRIMARY", 1) if up else failed("recovery", "status", t, 0.01, A))
    return ops


def test_rs1_restart_has_no_failover_and_the_outage_is_the_restart() -> None:
    fault = FaultRecord(0, "host-kill", A, injected_at_s=5.0, verified_at_s=5.2, reverted_at_s=35.0)
    metrics = compute_metrics(rs1_restart(), [fault], duration_s=40.0)
    assert metrics.write_unavailable_s == pytest.approx(36.305 - 4.905)
    assert metrics.read_unavailable_s is None
    assert metrics.failover_s is None
    assert metrics.failover_parts == FailoverParts()
    assert metrics.no_primary_s == pytest.approx(36.21 - 4.91)
    # DOWN poll at 36.0 ended 36.01; PRIMARY poll started 37.0.
    assert metrics.recovery_s == {A: pytest.approx(36.505 - 35.0)}
    assert metrics.member_states == {A: [(1.01, "PRIMARY"), (5.01, "DOWN"), (37.01, "PRIMARY")]}
    assert metrics.acknowledged_writes is None
    assert metrics.lost_acknowledged_writes is None
    assert metrics.replication_lag_max_s is None
    # Baseline: 40 writes of 5 ms before 5.0; after the restart at 35.0 they succeed again
    # ending 36.305, 36.405, ...: the first window holding five of them starts at 35.75.
    assert metrics.degradation_s == 0.75
    assert metrics.latency_ms.p99 == pytest.approx(5.0)
    assert metrics.probe_ops_per_s == pytest.approx((390 + 390 + 39) / 40.0)
    # Per probe: 390 writes, 390 hellos, 39 status polls over 40 s.
    assert metrics.probe_ops_per_s_by_probe == pytest.approx(
        {"write": 9.75, "failover": 9.75, "recovery": 0.975}
    )


def test_an_empty_run_is_all_unknown() -> None:
    metrics = compute_metrics([], [], duration_s=10.0)
    assert metrics == Metrics(probe_ops_per_s=0.0, probe_stall_s=0.0)
    assert compute_metrics([], [], duration_s=0.0).probe_ops_per_s is None
