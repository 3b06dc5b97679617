"""What each metric is computed from, so that a metric no part of the run records is refused
when the experiment is loaded instead of coming out null (an SLO that fails for want of data).

A run's history holds ops of named probes ("write", "raw_write", "read", "failover", "recovery",
"lag", "ledger", "load", "step", "stall") and its fault timeline the faults' kinds. `records`
below are those names: the probes' own, plus `data-loss` (such a fault was injected) and
`step:backup` / `step:restore` (a step with those marks ran). The experiment says which it
produces.
"""

from __future__ import annotations

from dataclasses import dataclass

from rsdrill.history import CHECK_PREFIX, STALL_PROBE


@dataclass(frozen=True)
class Source:
    """Records a metric needs: at least one of `records`; `what` names them for the user."""

    records: frozenset[str]
    what: str


def _source(what: str, *records: str) -> Source:
    return Source(frozenset(records), what)


WRITES = _source("the availability probe's writes (probes.availability.writes)", "write")
RAW_WRITES = _source(
    "the availability probe's raw writes (probes.availability.raw_writes)", "raw_write"
)
READS = _source("the availability probe's reads (probes.availability.reads)", "read")
FAILOVER = _source("the failover probe (probes.failover)", "failover")
RECOVERY = _source("the recovery probe (probes.recovery)", "recovery")
LAG = _source("the lag probe (probes.lag)", "lag")
LEDGER = _source("the durability probe (probes.durability)", "ledger")
CLIENT_OPS = _source(
    "the availability or load probe (probes.availability, probes.load)", "write", "read", "load"
)
CLIENT_PROBES = _source(
    "a client-side probe (availability, durability or load)", "write", "read", "ledger", "load"
)
ANY_WRITES = _source("writes (probes.availability or probes.durability)", "write", "ledger")
DATA_LOSS = _source("a data-loss fault (the disaster the drill recovers from)", "data-loss")
BACKUP = _source("a step with `marks: backup`", "step:backup")
RESTORE = _source("a step with `marks: restore`", "step:restore")
STALL = _source("the probe of rsdrill's own process (always on)", STALL_PROBE)
AUDIT = _source("the data audit (audit: quick or full)", "audit")
TRANSACTIONS = _source("the transactions probe (probes.transactions)", "txn")
CAUSAL = _source("the causal probe (probes.causal)", "causal")

RECOVERY_PREFIX = "recovery_s."
CHECK_METRIC_PREFIX = "probe."
"""`probe.<check>.<figure>`: a figure of the user's check `probes.checks.<check>`."""

SOURCES: dict[str, tuple[Source, ...]] = {
    "write_unavailable_s": (WRITES,),
    "raw_write_unavailable_s": (RAW_WRITES,),
    "driver_write_delay_s": (WRITES, RAW_WRITES),
    "read_unavailable_s": (READS,),
    "failover_s": (FAILOVER,),
    "failover_parts.detection_s": (FAILOVER, RECOVERY),
    "failover_parts.election_s": (FAILOVER, RECOVERY),
    "failover_parts.client_rediscovery_s": (FAILOVER, WRITES),
    "recovery_s.max": (RECOVERY,),
    "replication_lag_max_s": (LAG,),
    "acknowledged_writes": (LEDGER,),
    "lost_acknowledged_writes": (LEDGER,),
    "duplicated_writes": (LEDGER,),
    "latency_ms.p50": (CLIENT_OPS,),
    "latency_ms.p95": (CLIENT_OPS,),
    "latency_ms.p99": (CLIENT_OPS,),
    "latency_ms.max": (CLIENT_OPS,),
    "degradation_s": (CLIENT_OPS,),
    "no_primary_s": (FAILOVER,),
    "rto_s": (DATA_LOSS, ANY_WRITES),
    "rpo_s": (DATA_LOSS, LEDGER),
    "restore_s": (DATA_LOSS, RESTORE),
    "lost_before_backup": (DATA_LOSS, LEDGER, BACKUP),
    "probe_error_rate": (CLIENT_PROBES,),
    "probe_stall_s": (STALL,),
    "divergent_members": (AUDIT,),
    "audit_lag_s": (AUDIT,),
    "validate_errors": (AUDIT,),
    "rolled_back_writes": (AUDIT,),
    "rolled_back_acknowledged_writes": (AUDIT,),
    "transaction_anomalies": (TRANSACTIONS,),
    "causal_violations": (CAUSAL,),
}
"""Metric → what it is computed from (each entry must be present). `recovery_s.<host:port>`
is computed from what `recovery_s.max` is."""


# A sharded target's figure of one set (`shards.<name>.<figure>`, `config_servers.<figure>`)
# is measured from what the cluster's metric of the same kind is.
SET_FIGURE_SOURCES = {
    "write_unavailable_s": "write_unavailable_s",
    "writes": "write_unavailable_s",
    "failed_writes": "write_unavailable_s",
    "failover_s": "failover_s",
    "new_primary": "failover_s",
    "detection_s": "failover_parts.detection_s",
    "election_s": "failover_parts.election_s",
    "mongos_retarget_s": "failover_parts.client_rediscovery_s",
    "no_primary_s": "no_primary_s",
}


def missing_source(metric: str, records: set[str] | frozenset[str]) -> Source | None:
    """The first source of `metric` that none of `records` provides; None when it is measured
    (or the metric is not one of `SOURCES`)."""
    if metric.startswith(("shards.", "config_servers.")):
        metric = SET_FIGURE_SOURCES.get(metric.rpartition(".")[2], metric)
    if metric.startswith(CHECK_METRIC_PREFIX):
        check = metric.removeprefix(CHECK_METRIC_PREFIX).rsplit(".", 1)[0]
        source = _source(f"the check probes.checks.{check}", f"{CHECK_PREFIX}{check}")
        return None if source.records & records else source
    if metric.startswith(RECOVERY_PREFIX):
        metric = "recovery_s.max"
    for source in SOURCES.get(metric, ()):
        if not source.records & records:
            return source
    return None
