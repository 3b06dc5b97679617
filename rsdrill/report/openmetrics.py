"""A run's figures as Prometheus metrics: a node-exporter textfile, a Pushgateway push, and the
history's newest run per experiment (`rsdrill history --format openmetrics`).

Names follow Prometheus' conventions: an `rsdrill_` prefix, base units (seconds, not the
result's milliseconds), one family per idea with the variants as labels (failover phases,
latency percentiles, members). Every sample carries the experiment's labels (experiment, platform,
topology, faults) so a dashboard can select one drill. prometheus_client (the `metrics` extra)
writes the text, so the exposition follows its format exactly.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rsdrill.errors import RsdrillError
from rsdrill.hooks import hookimpl
from rsdrill.redact import redact_uri

if TYPE_CHECKING:
    from prometheus_client.core import GaugeMetricFamily
    from prometheus_client.metrics_core import Metric
    from prometheus_client.registry import CollectorRegistry

    from rsdrill.history import Op
    from rsdrill.result import Result
    from rsdrill.runs import Run

_log = logging.getLogger("rsdrill.metrics")


class MetricsExportError(RsdrillError):
    """The metrics could not be written or pushed (or prometheus_client is not installed)."""


@dataclass(frozen=True)
class MetricsExport:
    """A plugin of the run's events (rsdrill/hooks.py): the finished run's metrics to a
    textfile and/or a Pushgateway (`rsdrill run --metrics-file/--metrics-push`)."""

    file: Path | None = None
    push_url: str | None = None

    @hookimpl
    def rsdrill_run_finished(self, result: Result, ops: Sequence[Op], out_dir: Path) -> None:
        """Export; a failure is logged and leaves the verdict as it is."""
        try:
            registry = result_registry(result)
            if self.file is not None:
                write_textfile(registry, self.file)
            if self.push_url is not None:
                push(registry, self.push_url, result.experiment)
        except MetricsExportError as exc:
            _log.warning("metrics: not exported: %s", exc)


@dataclass(frozen=True)
class Family:
    name: str
    help: str
    label: str | None = None  # the label a dotted metric name's last part goes in
    scale: float = 1.0


# Each scalar metric of the result (by its SLO name, or the name's first part for the dotted
# ones) → its family. A test fails when the result grows a metric that is missing here.
FAMILIES: dict[str, Family] = {
    "write_unavailable_s": Family(
        "rsdrill_write_unavailable_seconds", "Longest stretch in which no write succeeded."
    ),
    "read_unavailable_s": Family(
        "rsdrill_read_unavailable_seconds", "Longest stretch in which no read succeeded."
    ),
    "raw_write_unavailable_s": Family(
        "rsdrill_raw_write_unavailable_seconds",
        "Longest write gap seen without the driver's retries.",
    ),
    "driver_write_delay_s": Family(
        "rsdrill_driver_write_delay_seconds",
        "How much longer the application's gap was than the raw gap (retries, rediscovery).",
    ),
    "no_primary_s": Family("rsdrill_no_primary_seconds", "Time with no member primary."),
    "failover_s": Family("rsdrill_failover_seconds", "Fault to the first write on a new primary."),
    "failover_parts": Family(
        "rsdrill_failover_phase_seconds",
        "The failover split into detection, election and client rediscovery.",
        label="phase",
    ),
    "recovery_s": Family(
        "rsdrill_member_recovery_seconds",
        "Revert to the member being SECONDARY again.",
        label="member",
    ),
    "replication_lag_max_s": Family(
        "rsdrill_replication_lag_max_seconds", "Largest replication lag of any secondary."
    ),
    "acknowledged_writes": Family(
        "rsdrill_acknowledged_writes", "Writes the cluster acknowledged during the run."
    ),
    "lost_acknowledged_writes": Family(
        "rsdrill_lost_acknowledged_writes", "Acknowledged writes missing at the read-back."
    ),
    "duplicated_writes": Family(
        "rsdrill_duplicated_writes", "Writes the read-back found more than once."
    ),
    "latency_ms": Family(
        "rsdrill_operation_latency_seconds",
        "Latency of the load's operations at a percentile (p50, p95, p99) and the maximum.",
        # Not `quantile`: Prometheus keeps that label for summaries (promtool says so).
        label="percentile",
        scale=0.001,
    ),
    "degradation_s": Family(
        "rsdrill_degradation_seconds", "How long latency stayed above its baseline after the fault."
    ),
    "probe_ops_per_s": Family(
        "rsdrill_probe_requests_per_second", "The probes' own load on the cluster."
    ),
    "rto_s": Family("rsdrill_rto_seconds", "Disaster-recovery drill: data loss to service back."),
    "rpo_s": Family("rsdrill_rpo_seconds", "Disaster-recovery drill: data lost, as time."),
    "restore_s": Family("rsdrill_restore_seconds", "Disaster-recovery drill: the restore step."),
    "lost_before_backup": Family(
        "rsdrill_lost_before_backup_writes", "Acknowledged writes the backup did not hold."
    ),
    "probe_stall_s": Family(
        "rsdrill_probe_stall_seconds", "Longest stall of rsdrill's own process (0: none)."
    ),
    "divergent_members": Family(
        "rsdrill_divergent_members", "Data audit: members whose data differs from the primary's."
    ),
    "transactions_checked": Family(
        "rsdrill_transactions_checked", "Transactions probe: transactions its checker read."
    ),
    "transaction_anomalies": Family(
        "rsdrill_transaction_anomalies",
        "Transactions probe: anomalies found in its list-append history (Elle's method).",
    ),
    "causal_reads_checked": Family(
        "rsdrill_causal_reads_checked", "Causal probe: the sessions' reads its checker judged."
    ),
    "causal_violations": Family(
        "rsdrill_causal_violations", "Causal probe: reads that broke a causal guarantee."
    ),
    "audit_lag_s": Family(
        "rsdrill_audit_lag_seconds", "Data audit: time for every member to apply the last write."
    ),
    "validate_errors": Family(
        "rsdrill_validate_errors", "Data audit: collections a member's validate found not valid."
    ),
    "rolled_back_writes": Family(
        "rsdrill_rolled_back_writes", "Data audit: documents the members' rollbacks took."
    ),
    "rolled_back_acknowledged_writes": Family(
        "rsdrill_rolled_back_acknowledged_writes",
        "Data audit: the probes' acknowledged writes among what the rollbacks took.",
    ),
}
# `probe.<check>.<figure>`: the user's own checks, labelled by check.
CHECK_FAMILIES: dict[str, Family] = {
    "unavailable_s": Family(
        "rsdrill_check_unavailable_seconds",
        "A check of your own: the longest window without a healthy sample.",
        label="check",
    ),
    "failed_samples": Family(
        "rsdrill_check_failed_samples", "A check of your own: samples that failed.", label="check"
    ),
    "samples": Family(
        "rsdrill_check_samples", "A check of your own: samples taken.", label="check"
    ),
}


# A sharded target's figures per replica set (`shards.<shard>.<figure>`, and
# `config_servers.<figure>` as set "config"), labelled by set.
SET_FAMILIES: dict[str, Family] = {
    "write_unavailable_s": Family(
        "rsdrill_shard_write_unavailable_seconds",
        "A shard's longest write gap through the routers.", label="set",
    ),
    "writes": Family("rsdrill_shard_writes", "A shard's write probe: attempts.", label="set"),
    "failed_writes": Family(
        "rsdrill_shard_failed_writes", "A shard's write probe: failed attempts.", label="set"
    ),
    "failover_s": Family(
        "rsdrill_set_failover_seconds", "A replica set of the cluster: its failover.",
        label="set",
    ),
    "detection_s": Family(
        "rsdrill_set_detection_seconds", "A replica set of the cluster: fault to election.",
        label="set",
    ),
    "election_s": Family(
        "rsdrill_set_election_seconds",
        "A replica set of the cluster: election to the new primary writable.", label="set",
    ),
    "mongos_retarget_s": Family(
        "rsdrill_mongos_retarget_seconds",
        "A shard's new primary writable to the first write through a router on it.",
        label="set",
    ),
    "no_primary_s": Family(
        "rsdrill_set_no_primary_seconds", "A replica set of the cluster: time with no primary.",
        label="set",
    ),
}  # fmt: skip
SET_HEADS = ("shards", "config_servers")


def samples(flat: Iterable[tuple[str, float | None]]) -> Iterator[tuple[Family, str | None, float]]:
    """(family, label value, value) of each measured scalar metric, in base units."""
    for name, value in flat:
        if value is None:
            continue
        head, _, rest = name.partition(".")
        if head == "probe":
            check, _, figure = rest.rpartition(".")
            yield CHECK_FAMILIES[figure], check, float(value)
            continue
        if head in SET_HEADS:
            which, _, figure = rest.rpartition(".")
            yield SET_FAMILIES[figure], which or "config", float(value)
            continue
        family = FAMILIES.get(head)
        if family is None:  # a metric an older rsdrill recorded in the history
            continue
        label = None
        if family.label is not None:
            label = rest.removesuffix("_s")
        yield family, label, value * family.scale


def result_registry(result: Result) -> CollectorRegistry:
    """The run's metrics, SLO verdicts and run facts, labelled with the experiment's labels."""
    from rsdrill.report.common import scalar_metrics, slo_title

    labels = {
        "experiment": result.experiment,
        "platform": result.target.platform,
        "topology": result.target.topology,
        "faults": ",".join(sorted({f.kind for f in result.faults})),
    }
    started = dt.datetime.fromisoformat(result.started_at).timestamp()
    facts = [
        ("rsdrill_run_passed", "1 when every SLO held (verdict pass), else 0.",
         float(result.verdict == "pass")),
        ("rsdrill_run_exit_code", "The run's exit status (0 pass, 1 fail, 3 aborted, 4 error).",
         float(result.exit_code)),
        ("rsdrill_run_duration_seconds", "The run, from the probes' start to the end.",
         result.duration_s),
        ("rsdrill_run_start_timestamp_seconds", "When the run started (Unix time).", started),
    ]  # fmt: skip
    flat = [(n, None if v is None else float(v)) for n, v in scalar_metrics(result.metrics)]
    registry, gauge = _registry()
    for name, text, value in facts:
        gauge(name, text, labels, value)
    gauge("rsdrill_run_info", "The run's verdict and the rsdrill that measured it.",
          labels | {"verdict": result.verdict, "version": result.rsdrill_version}, 1.0)  # fmt: skip
    by_probe = result.metrics.probe_ops_per_s_by_probe
    if by_probe:  # then the total is their sum: one family, labelled by probe
        flat = [(n, v) for n, v in flat if n != "probe_ops_per_s"]
    for family, label, value in samples(flat):
        extra = {family.label: label} if family.label and label is not None else {}
        gauge(family.name, family.help, labels | extra, value)
    for probe, rate in by_probe.items():
        gauge("rsdrill_probe_requests_per_second", FAMILIES["probe_ops_per_s"].help,
              labels | {"probe": probe}, rate)  # fmt: skip
    for slo in result.slo:
        slo_labels = labels | {"slo": slo_title(slo)}
        gauge("rsdrill_slo_passed", "1 when the SLO held, else 0.", slo_labels,
              float(slo.passed))  # fmt: skip
    return registry


def history_registry(runs: Iterable[Run]) -> CollectorRegistry:
    """Per experiment: runs recorded by verdict (a counter) and the newest run's metrics."""
    registry, gauge = _registry()  # first: it says which extra to install when it is missing
    from prometheus_client.core import CounterMetricFamily

    newest: dict[str, Run] = {}
    counts: dict[tuple[str, str], int] = {}
    for run in runs:
        newest[run.experiment] = run  # oldest first: the last one stays
        counts[(run.experiment, run.verdict)] = counts.get((run.experiment, run.verdict), 0) + 1
    runs_total = CounterMetricFamily(
        "rsdrill_runs", "Runs recorded in the history.", labels=["experiment", "verdict"]
    )
    for (experiment, verdict), count in sorted(counts.items()):
        runs_total.add_metric([experiment, verdict], count)
    registry.register(_Fixed([runs_total]))
    for experiment, run in sorted(newest.items()):
        labels = {"experiment": experiment}
        gauge("rsdrill_run_passed", "1 when the newest run passed, else 0.", labels,
              float(run.verdict == "pass"))  # fmt: skip
        gauge("rsdrill_run_start_timestamp_seconds", "When the newest run started (Unix time).",
              labels, run.started_at.timestamp())  # fmt: skip
        gauge("rsdrill_run_duration_seconds", "The newest run's duration.", labels, run.duration_s)
        # The history keeps `recovery_s.max` next to each member's: the members tell it.
        flat = [(n, v) for n, v in run.metrics.items() if n != "recovery_s.max"]
        for family, label, value in samples(flat):
            extra = {family.label: label} if family.label and label is not None else {}
            gauge(family.name, family.help, labels | extra, value)
    return registry


def exposition(registry: CollectorRegistry) -> str:
    """The OpenMetrics text of `registry` (ends with `# EOF`)."""
    from prometheus_client.openmetrics.exposition import generate_latest

    return generate_latest(registry).decode()


def write_textfile(registry: CollectorRegistry, path: Path) -> None:
    """Write for node-exporter's textfile collector: its text format, replaced atomically (the
    collector must never read half a file)."""
    from prometheus_client import write_to_textfile

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_to_textfile(str(path), registry)
    except OSError as exc:
        raise MetricsExportError(f"--metrics-file {path}: {exc.strerror or exc}") from None


def push(registry: CollectorRegistry, url: str, experiment: str, timeout_s: float = 10.0) -> None:
    """Replace the experiment's group on a Pushgateway (job `rsdrill`, grouped by experiment)."""
    from prometheus_client import push_to_gateway
    from prometheus_client.exposition import basic_auth_handler, default_handler

    from rsdrill.report.notify import split_login

    url, login = split_login(url)
    handler: Callable[..., Callable[[], None]] = default_handler
    if login is not None:
        handler = functools.partial(basic_auth_handler, username=login[0], password=login[1])
    try:
        push_to_gateway(url, job="rsdrill", registry=registry, handler=handler,
                        grouping_key={"experiment": experiment}, timeout=timeout_s)  # fmt: skip
    except OSError as exc:  # urllib's errors (refused, timeout, HTTP status) are OSErrors
        raise MetricsExportError(f"--metrics-push {redact_uri(url)}: {exc}") from None


class _Fixed:
    """A collector of families built once."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> list[Metric]:
        return self._families


def require_client() -> None:
    """Raise MetricsExportError, saying what to install, when prometheus_client is missing."""
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        raise MetricsExportError(
            "metrics need prometheus_client: pip install 'rsdrill[metrics]'"
        ) from None


def _registry() -> tuple[CollectorRegistry, _Gauge]:
    require_client()
    from prometheus_client.core import CollectorRegistry

    registry = CollectorRegistry(auto_describe=True)
    gauge = _Gauge(registry)
    return registry, gauge


class _Gauge:
    """Adds gauge samples, one family per name with its samples' label names in order."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._families: dict[tuple[str, tuple[str, ...]], GaugeMetricFamily] = {}
        self._registry = registry

    def __call__(self, name: str, text: str, labels: Mapping[str, str], value: float) -> None:
        from prometheus_client.core import GaugeMetricFamily

        key = (name, tuple(labels))
        family = self._families.get(key)
        if family is None:
            if any(existing == name for existing, _ in self._families):
                raise ValueError(f"{name}: samples with different label names")
            family = GaugeMetricFamily(name, text, labels=list(labels))
            self._families[key] = family
            self._registry.register(_Fixed([family]))
        family.add_metric(list(labels.values()), value)
