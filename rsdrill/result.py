"""The result of a run: `result.json` (CONTRACT: scripts and CI depend on these names).

`schema` is "rsdrill.result/v1". Times are seconds since the run started unless a name says
otherwise; a metric that could not be measured is null, never a guess.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rsdrill.errors import RsdrillError

SCHEMA = "rsdrill.result/v1"
Verdict = Literal["pass", "fail", "aborted", "error"]

EXIT_CODES: dict[str, int] = {"pass": 0, "fail": 1, "invalid": 2, "aborted": 3, "error": 4}


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, defer_build=True)


class FaultResult(_Model):
    kind: str
    target: str
    injected_at_s: float | None
    reverted_at_s: float | None
    applied_at_s: float | None = Field(
        None, description="when the injection returned: a duration is held from here"
    )
    verified_at_s: float | None = None
    due_at_s: float | None = Field(
        None,
        description="when the timeline had it go in (its `at`, slid by any wait for a role or a "
        "game-day answer): `injected_at_s - due_at_s` is rsdrill's own delay on its machine",
    )
    revert_due_at_s: float | None = Field(
        None,
        description="when the timeline had it reverted (its duration from `applied_at_s`); "
        "None when something else reverted it: the run's end, an abort, a game-day `r`",
    )
    approximation: str | None = Field(
        None, description="what the platform did instead of the fault itself (approximate: true)"
    )
    detail: dict[str, Any] = Field(default_factory=dict)


class FailoverParts(_Model):
    """Fault → election called (detection), → new primary writable (election), → the client's
    first successful write there (client rediscovery)."""

    detection_s: float | None = None
    election_s: float | None = None
    client_rediscovery_s: float | None = None


class Latency(_Model):
    p50: float | None = None
    p95: float | None = None
    p99: float | None = None
    max: float | None = None


class CheckFigures(_Model):
    """What one steady-state check of the user's own (`probes.checks.<name>`) measured."""

    unavailable_s: float | None = Field(
        None, description="the longest window without a healthy sample"
    )
    failed_samples: int = 0
    samples: int = 0


class Stall(_Model):
    """rsdrill's own process did not run: a wake-up of its stall probe came this late."""

    at_s: float = Field(description="when the process should have woken up")
    seconds: float


class StalledGap(_Model):
    """An availability gap (the window behind one of the `*_unavailable_s` metrics) during
    which rsdrill's own process stalled, or its probe began an attempt late: part of it may be
    this machine's, not the cluster's."""

    metric: str = Field(description="write_unavailable_s, read_unavailable_s, ...")
    start_s: float
    end_s: float
    stalled_s: float = Field(
        description="how much of the gap the stalls and its probe's late starts overlap"
    )
    stall_at_s: float = Field(
        description="the start of the longest stall overlapping the gap (without one: of the "
        "longest late start of its probe)"
    )


class SetFigures(_Model):
    """One replica set of a sharded target (analysis.sharded)."""

    write_unavailable_s: float | None = Field(
        None, description="the longest gap of its shard's write probe through the routers"
    )
    writes: int = Field(0, description="its shard's write probe's attempts")
    failed_writes: int = Field(0, description="… that failed")
    failover_s: float | None = None
    new_primary: str | None = None
    detection_s: float | None = None
    election_s: float | None = None
    mongos_retarget_s: float | None = Field(
        None,
        description="from the new primary writable to the first write through a router "
        "acknowledged after it",
    )
    no_primary_s: float | None = None


class Metrics(_Model):
    write_unavailable_s: float | None = None
    read_unavailable_s: float | None = None
    failover_s: float | None = Field(
        None,
        description="fault injected → a primary of a new term accepting writes: another "
        "member, or the old one elected again where another could have won; null when no "
        "election followed (a one-member set's member coming back is none)",
    )
    failover_parts: FailoverParts = Field(default_factory=FailoverParts)
    recovery_s: dict[str, float | None] = Field(default_factory=dict)
    member_states: dict[str, list[tuple[float, str]]] = Field(default_factory=dict)
    replication_lag_max_s: float | None = None
    acknowledged_writes: int | None = None
    lost_acknowledged_writes: int | None = None
    latency_ms: Latency = Field(default_factory=Latency)
    degradation_s: float | None = None
    # Beyond the contract's minimum:
    # The server's own write gap (rsdrill's wire client, no driver), and how much the
    # application's (pymongo's) gap exceeded it.
    raw_write_unavailable_s: float | None = None
    driver_write_delay_s: float | None = None
    no_primary_s: float | None = None
    lost_acknowledged_seqs: list[int] = Field(default_factory=list)
    # Ledger seqs the read-back found more than once (through a sharded cluster's routers).
    duplicated_writes: int | None = None
    probe_ops_per_s: float | None = None
    # The same per probe: the probes' own load on the cluster (each op is one request sent).
    probe_ops_per_s_by_probe: dict[str, float] = Field(default_factory=dict)
    # Members that fell off the oplog (RECOVERING until resynced), see analysis.recovery.too_stale.
    too_stale: list[str] = Field(default_factory=list)
    # A disaster-recovery drill (a data-loss fault and a restore step):
    rto_s: float | None = None
    rpo_s: float | None = None
    restore_s: float | None = None
    lost_before_backup: int | None = None
    # Metrics that do not exist for the target's topology (a standalone has no failover): null
    # above because there is nothing to measure, not because measuring failed.
    not_applicable: list[str] = Field(default_factory=list)
    # The user's own steady-state checks, by name (`probe.<name>.unavailable_s` in SLOs).
    probe: dict[str, CheckFigures] = Field(default_factory=dict)
    # rsdrill's own process: its longest stall (0.0: none), the longest stalls, and the
    # availability gaps they overlap (analysis.stall).
    probe_stall_s: float | None = None
    probe_stalls: list[Stall] = Field(default_factory=list)
    probe_stalled_gaps: list[StalledGap] = Field(default_factory=list)
    # The data audit (experiment `audit:`): members whose data differs from the primary's (None:
    # not compared), and how long they took to apply the primary's last write.
    divergent_members: int | None = None
    audit_lag_s: float | None = None
    # Collections (per member) whose own `validate` found them not valid (None: not validated).
    validate_errors: int | None = None
    # What the members' rollbacks took during the run (documents in their rollback files), and
    # the probes' acknowledged writes among them (None: not known, see analysis.rollbacks).
    rolled_back_writes: int | None = None
    rolled_back_acknowledged_writes: int | None = None
    # The transactions probe (probes.transactions), checked as Elle checks list-append
    # histories: how many transactions, the anomalies found (None: no such probe), their types
    # and the shortest cycles, in words (analysis.elle).
    transactions_checked: int | None = None
    transaction_anomalies: int | None = None
    transaction_anomaly_types: list[str] = Field(default_factory=list)
    transaction_cycles: list[str] = Field(default_factory=list)
    # The causal probe (probes.causal): its reads checked, the violations of the causal
    # guarantees (None: no such probe), their kinds and the first of each, in words
    # (analysis.causal).
    causal_reads_checked: int | None = None
    causal_violations: int | None = None
    causal_violation_types: list[str] = Field(default_factory=list)
    causal_examples: list[str] = Field(default_factory=list)
    # A sharded target: each shard's figures by its name, and the config servers' (their
    # writes are the cluster's metadata: no write probe of theirs).
    shards: dict[str, SetFigures] = Field(default_factory=dict)
    config_servers: SetFigures | None = None


class AuditDivergence(_Model):
    member: str
    database: str
    collection: str
    ids: list[str] = Field(default_factory=list, description="a sample of the _ids that differ")
    primary_count: int | None = Field(None, description="documents in the primary's copy")
    member_count: int | None = Field(None, description="documents in the member's copy")


class AuditOplogDifference(_Model):
    member: str
    ts: str = Field(description="the entry's timestamp, as Timestamp(seconds, increment)")
    term: int | None = None
    reason: Literal["missing", "extra", "differs"]


class AuditInvalid(_Model):
    member: str
    database: str
    collection: str
    errors: list[str] = Field(default_factory=list, description="as its validate said them")


class RolledBackWrites(_Model):
    probe: str
    write_concern: str
    seqs: list[int] = Field(description="the acknowledged writes (their seq) a rollback took")


class AuditRollback(_Model):
    """One member's rollbacks during the run, from its rollback id and its rollback files."""

    member: str
    rollbacks: int | None = Field(
        None, description="how many (serverStatus repl.rbid's change); None: not read"
    )
    readable: bool = Field(
        description="its rollback files could be read (sandbox and local platforms)"
    )
    namespaces: dict[str, int] = Field(
        default_factory=dict, description="namespace → documents its rollbacks took"
    )
    files: list[str] = Field(default_factory=list)
    acknowledged: list[RolledBackWrites] = Field(
        default_factory=list, description="the probes' acknowledged writes among them"
    )


class AuditResult(_Model):
    """The data audit after the run: dbHash of each audited database on every member against
    the primary's, once every member had applied the primary's last write."""

    consistent: bool | None = Field(None, description="None: not compared (see error)")
    caught_up: bool | None = None
    lag_s: float | None = None
    primary: str | None = None
    members: list[str] = Field(default_factory=list)
    databases: list[str] = Field(default_factory=list)
    divergences: list[AuditDivergence] = Field(default_factory=list)
    oplog_compared: int | None = Field(
        None, description="newest oplog entries read on each member and compared; None: not"
    )
    oplog_differences: list[AuditOplogDifference] = Field(default_factory=list)
    oplog_error: str | None = Field(None, description="why the oplogs could not be compared")
    validated: int | None = Field(
        None, description="collections validated (validate, on every member); None: not run"
    )
    invalid: list[AuditInvalid] = Field(default_factory=list)
    validate_error: str | None = Field(None, description="why validate could not be run")
    rollbacks_accounted: bool = Field(
        False, description="the members' rollbacks were read (a run's audit: since its start)"
    )
    rollbacks: list[AuditRollback] = Field(default_factory=list)
    error: str | None = Field(None, description="why the members could not be compared")


class SloResult(_Model):
    metric: str
    op: str
    threshold: float
    observed: float | None
    passed: bool = Field(alias="pass")


class ServerInfo(_Model):
    """What the target's members said they are (`rsdrill.deployment`): a figure measured on
    rsdrill's emulator says so here."""

    topology: str = Field(description="replica set | standalone | sharded")
    set_name: str | None = None
    version: str | None = None
    handshake: str = Field("hello", description="hello, or isMaster for servers without hello")
    streaming_hello: bool = Field(False, description="the server offers streaming hello")
    storage_engine: str | None = None
    emulator: bool = Field(False, description="rsdrill's bundled emulator, not mongod")
    tls: bool = False
    auth_mechanism: str | None = None


class TargetInfo(_Model):
    platform: str
    topology: str
    cluster: str = Field(
        "", description="the cluster's name in the history (target.cluster, else derived)"
    )
    uri: str = Field(description="passwords redacted")
    members: list[str] = Field(default_factory=list)
    zones: dict[str, str] = Field(
        default_factory=dict,
        description="member → its zone (its tags, or its platform's), as placed before the faults",
    )
    server: ServerInfo | None = None


class RunClockInfo(_Model):
    """The run's time origin, to line its seconds up with other logs of the same machine."""

    t0_monotonic: float = Field(description="CLOCK_MONOTONIC at t = 0 (probes started)")
    t0_wall: float = Field(description="Unix time at t = 0")


class BalancerHeld(_Model):
    """`guards.stop_balancer`: the balancer's state before the run, and what the run did to it."""

    mode_before: str = Field(
        description="balancerStatus's mode after the guards, before the first fault: full, "
        "off (left off), autoSplitOnly (moves no chunk: left as it is)"
    )
    router: str = Field(description="the router that answered balancerStatus")
    stopped_at: str | None = Field(
        None, description="wall-clock ISO 8601 UTC: balancerStop done (null: not stopped)"
    )
    restored_at: str | None = Field(
        None,
        description="wall-clock ISO 8601 UTC: balancerStart done after the faults (null: not "
        "stopped, or not restarted: `rsdrill recover` owes it)",
    )


class ReAdded(_Model):
    """A member lost with the majority, added back after the faults (MongoDB's procedure)."""

    host: str
    added_at_s: float | None = Field(None, description="in the config again, without a vote")
    secondary_at_s: float | None = Field(
        None, description="SECONDARY (rolled back what the survivors never had, caught up)"
    )
    restored_at_s: float | None = Field(None, description="its own votes and priority again")


class RtoParts(_Model):
    """A lost majority's write outage as operations teams split it (analysis.majority_rto):
    the loss → the clients see it (the first write that failed after it: what an alert on
    failed writes sees) → the forced reconfig (the runbook's decision, `after`) → a survivor
    writable primary (the election) → the clients' first write acknowledged (rediscovery)."""

    rto_s: float | None = Field(None, description="the loss → the first write acknowledged")
    detection_s: float | None = None
    decision_s: float | None = None
    election_s: float | None = None
    client_s: float | None = None


class RecoveryDone(_Model):
    """`recovery: {force_reconfig}`: the runbook for a lost voting majority, as carried out.
    Seconds are from the start of the probes."""

    loss_at_s: float = Field(description="the schedule leaves fewer than a majority up")
    forced_at_s: float | None = Field(None, description="the forced reconfig answered ok")
    survivors: list[str] = Field(default_factory=list, description="the forced config's members")
    sent_to: str | None = Field(None, description="the survivor it was run on (the freshest)")
    version: int | None = Field(None, description="the forced config's version")
    primary_at_s: float | None = Field(None, description="a survivor writable primary")
    re_added: list[ReAdded] = Field(default_factory=list)
    error: str | None = None
    rto: RtoParts = Field(default_factory=RtoParts, description="the outage in its parts")


class Result(_Model):
    schema_: str = Field(SCHEMA, alias="schema")
    experiment: str
    verdict: Verdict
    exit_code: int
    started_at: str = Field(
        description="wall-clock start, ISO 8601 UTC: before the setup and any lease wait"
    )
    duration_s: float = Field(description="from t0 (clock.t0_wall: the probes' start) to the end")
    target: TargetInfo
    faults: list[FaultResult] = Field(default_factory=list)
    metrics: Metrics = Field(default_factory=Metrics)
    slo: list[SloResult] = Field(default_factory=list)
    error: str | None = None
    clock: RunClockInfo | None = None
    rsdrill_version: str = ""
    random_schedule: dict[str, Any] | None = Field(
        None,
        description="faults drawn from a seed: {seed, spec, faults}; `rsdrill run FILE --seed "
        "<seed>` draws the same faults",
    )
    audit: AuditResult | None = Field(None, description="the data audit (experiment `audit:`)")
    balancer: BalancerHeld | None = Field(
        None, description="the balancer held for the run (guards.stop_balancer)"
    )
    recovery: RecoveryDone | None = Field(
        None, description="the forced reconfig and the heal (experiment `recovery:`)"
    )
    ignored_monitors: list[str] = Field(
        default_factory=list,
        description="abort_on sources that could not be asked and were ignored "
        "(on_unreachable: ignore), each with why",
    )

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True, indent=2)

    @classmethod
    def from_json(cls, text: str) -> Result:
        return cls.model_validate_json(text)


class ResultFileError(RsdrillError):
    """A file that cannot be read as a result.json; the message names it and why."""


def read_result(path: Path) -> Result:
    """The run result in `path`, or ResultFileError in one line: unreadable, not UTF-8 (which
    once escaped `history push` and `replay --from` as a traceback) or not a result."""
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise ResultFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ResultFileError(
            f"{path}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x}): not an rsdrill "
            "result.json"
        ) from None
    try:
        return Result.from_json(text)
    except ValidationError as exc:
        raise ResultFileError(
            f"{path}: not an rsdrill result.json ({exc.error_count()} problems)"
        ) from None
