"""The one entry point: a run's history and fault timeline in, the result's metrics out."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rsdrill.analysis.availability import driver_write_delay_s, unavailable_s
from rsdrill.analysis.causal import check as check_causal
from rsdrill.analysis.checks import checks
from rsdrill.analysis.disaster_recovery import disaster_recovery
from rsdrill.analysis.durability import durability
from rsdrill.analysis.failover import failover_parts, find_failover, no_primary_s
from rsdrill.analysis.lag import replication_lag_max_s
from rsdrill.analysis.latency import degradation_s, latency_ms
from rsdrill.analysis.recovery import member_states, recovery_s, too_stale
from rsdrill.analysis.sharded import (
    first_failover,
    longest_no_primary_s,
    set_failovers,
    set_figures,
)
from rsdrill.analysis.slo import REPLICA_SET_ONLY
from rsdrill.analysis.stall import STALLS_KEPT, probe_stall_s, stalled_gaps, stalls
from rsdrill.history import (
    CAUSAL_PROBE,
    CHECK_PREFIX,
    STALL_PROBE,
    TXN_PROBE,
    FaultRecord,
    Op,
    probe_counts,
)
from rsdrill.layout import CONFIG
from rsdrill.result import FailoverParts, Metrics

if TYPE_CHECKING:
    from rsdrill.analysis.elle import Model


def compute_metrics(
    ops: Sequence[Op],
    faults: Sequence[FaultRecord],
    *,
    duration_s: float,
    standalone: bool = False,
    transactions_model: Model = "snapshot-isolation",
    sets: Mapping[str, Sequence[str]] | None = None,
) -> Metrics:
    """Every metric of the result (CONTRACT) from the history; a pure function.

    `ops` in any order; `duration_s` is the run's length, for `probe_ops_per_s` (the number of
    ops of all probes per second; None when `duration_s` is not positive) and
    `probe_ops_per_s_by_probe` (the same per probe: each op is one request the probe sent, so
    this is its load on the cluster; empty when `duration_s` is not positive). Each metric's
    definition is in the docstring of the function computing it. For a `standalone` server the
    replica-set metrics are null and listed in `not_applicable`. The transactions probe's
    history is judged against `transactions_model` (what its experiment says the transactions
    promise: analysis.elle.ALLOWED). A sharded target's replica sets (`sets`, by name) are
    judged each on its own (analysis.sharded: `shards`, `config_servers`); the cluster's
    `failover_s` and its parts are then the first failover of any of them, `no_primary_s` the
    longest window in which one of them had no primary.
    """
    failover_ops: Sequence[Op] = ops
    by_set = set_failovers(ops, faults, sets) if sets else {}
    figures = set_figures(ops, by_set)
    no_primary = longest_no_primary_s(figures) if sets else no_primary_s(ops)
    if sets:
        first = first_failover(by_set)
        failover_ops, failover = first if first else (ops, None)
    else:
        failover = None if standalone else find_failover(ops, faults)
    ledger = durability(ops)
    # The user's own checks ask their application, not the cluster, and a stall of this process
    # sends nothing: neither is the probes' load.
    cluster_ops = Counter({
        probe: n for probe, n in probe_counts(ops).items()
        if not probe.startswith(CHECK_PREFIX) and probe != STALL_PROBE
    })  # fmt: skip
    drill = disaster_recovery(ops, faults)
    txn = transactions(ops, transactions_model)
    sessions = causal_figures(ops)
    return Metrics(
        write_unavailable_s=unavailable_s(ops, "write"),
        read_unavailable_s=unavailable_s(ops, "read"),
        raw_write_unavailable_s=unavailable_s(ops, "raw_write"),
        driver_write_delay_s=driver_write_delay_s(ops),
        failover_s=failover.seconds if failover else None,
        failover_parts=failover_parts(failover_ops, failover) if failover else FailoverParts(),
        recovery_s=recovery_s(ops, faults),
        member_states=member_states(ops),
        replication_lag_max_s=None if standalone else replication_lag_max_s(ops),
        acknowledged_writes=ledger.acknowledged_writes,
        lost_acknowledged_writes=ledger.lost_acknowledged_writes,
        lost_acknowledged_seqs=ledger.lost_acknowledged_seqs,
        duplicated_writes=ledger.duplicated_writes,
        latency_ms=latency_ms(ops),
        degradation_s=degradation_s(ops, faults),
        no_primary_s=no_primary,
        probe_ops_per_s=cluster_ops.total() / duration_s if duration_s > 0 else None,
        probe_ops_per_s_by_probe=(
            {n: k / duration_s for n, k in sorted(cluster_ops.items())} if duration_s > 0 else {}
        ),
        too_stale=too_stale(ops),
        rto_s=drill.rto_s,
        rpo_s=drill.rpo_s,
        restore_s=drill.restore_s,
        lost_before_backup=drill.lost_before_backup,
        not_applicable=list(REPLICA_SET_ONLY) if standalone else [],
        probe=checks(ops),
        probe_stall_s=probe_stall_s(ops),
        probe_stalls=stalls(ops)[:STALLS_KEPT],
        probe_stalled_gaps=stalled_gaps(ops),
        **txn,
        **sessions,
        config_servers=figures.pop(CONFIG, None),
        shards=figures,
    )


CYCLES_KEPT = 5


def transactions(ops: Sequence[Op], model: Model) -> dict[str, Any]:
    """The transactions probe's figures (none when it did not run): how many transactions,
    every anomaly Elle's method finds that `model` forbids (cycles and the rest), their types,
    the shortest cycles."""
    if not probe_counts(ops)[TXN_PROBE]:
        return {}
    from rsdrill.analysis.elle import check, txns_from_ops  # networkx: only when asked

    txns = txns_from_ops(ops)
    report = check(txns, model)
    return {
        "transactions_checked": len(txns),
        "transaction_anomalies": report.count,
        "transaction_anomaly_types": report.anomaly_types,
        "transaction_cycles": [c.words() for c in report.cycles[:CYCLES_KEPT]],
    }


def causal_figures(ops: Sequence[Op]) -> dict[str, Any]:
    """The causal probe's figures (none when it did not run): reads checked, violations of
    the causal guarantees, their kinds and the first of each."""
    if not probe_counts(ops)[CAUSAL_PROBE]:
        return {}
    report = check_causal(ops)
    return {
        "causal_reads_checked": report.reads_checked,
        "causal_violations": len(report.violations),
        "causal_violation_types": report.kinds,
        "causal_examples": [v.words for v in report.firsts()],
    }
