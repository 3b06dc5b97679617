"""The `probes:` section of an experiment file: what each probe records, and how often."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, WithJsonSchema, model_validator

from rsdrill.experiment.checks import CheckName, CheckProbe
from rsdrill.fields import Duration, FieldProblem, Strict
from rsdrill.history import STALL_PROBE

WriteConcernW = int | Literal["majority"]


class AvailabilityProbe(Strict):
    """A write loop and a read loop, each recording every attempt."""

    interval: Duration = 0.02
    timeout: Duration = Field(0.25, description="socket, connect and server-selection timeout")
    write_concern: WriteConcernW = "majority"
    journal: bool | None = None
    retries: bool = Field(
        False, description="pymongo's retryable writes/reads: off, or on as an application has them"
    )
    read_preference: Literal[
        "primary", "primaryPreferred", "secondary", "secondaryPreferred", "nearest"
    ] = "primary"
    read_tags: tuple[dict[str, str], ...] = Field(
        (),
        description="tag sets the reads select members by, tried in order (the drivers' "
        "readPreferenceTags), e.g. [{zone: east}, {zone: west}]: reads that stay in the "
        "zones a fault spares; not with read_preference primary",
    )
    reads: bool = True
    writes: bool = True
    raw_writes: bool = Field(
        True,
        description="with writes: also write through rsdrill's own wire client, which "
        "reconnects at once: the server's raw gap (raw_write_unavailable_s), without the "
        "driver's rediscovery",
    )

    @model_validator(mode="after")
    def _tags_need_a_mode_that_takes_them(self) -> AvailabilityProbe:
        if self.read_tags and self.read_preference == "primary":
            raise FieldProblem(("read_tags",), "read_preference primary takes no tag sets "
                               "(MongoDB refuses them): choose nearest, secondary, "
                               "...")  # fmt: skip
        return self


class FailoverProbe(Strict):
    """A direct connection to every member watching hello: who is primary, from when writable."""

    interval: Duration = 0.02
    timeout: Duration = 0.25
    max_await: Duration = Field(
        0.5,
        description="awaitable hello: a member that is not changing answers this often (one "
        "operation each); a frozen one is seen after max_await + timeout, a changed or killed "
        "one at once",
    )


class RecoveryProbe(Strict):
    """replSetGetStatus on every member: each member's state sequence with times."""

    interval: Duration = 0.1
    timeout: Duration = 0.5


class LagProbe(Strict):
    """Replication lag of each secondary, from the primary's replSetGetStatus."""

    interval: Duration = 0.5
    timeout: Duration = 0.5


class DurabilityProbe(Strict):
    """A ledger of acknowledged writes, read back after recovery (majority read concern)."""

    interval: Duration = 0.05
    timeout: Duration = 0.25
    write_concern: WriteConcernW = "majority"
    journal: bool | None = None
    retries: bool = True
    readback_timeout: Duration = 60.0
    share_writes: bool = Field(
        True,
        description="with the availability probe writing with the same write_concern and "
        "journal: its acknowledged inserts are the ledger (no writes of its own; interval, "
        "timeout and retries are then the availability probe's)",
    )


class LoadProbe(Strict):
    """A YCSB-like workload whose latencies the analyzers turn into percentiles."""

    workload: Literal["a", "b", "c"] = Field(
        "a", description="a: 50/50 read/update; b: 95/5; c: reads only"
    )
    rate: float = Field(200, gt=0, description="operations per second, all threads together")
    threads: int = Field(4, ge=1, le=64)
    records: int = Field(1000, ge=1)
    record_bytes: int = Field(100, ge=1)
    distribution: Literal["zipfian", "uniform"] = "zipfian"
    timeout: Duration = 2.0
    write_concern: WriteConcernW = 1


class RegisterProbe(Strict):
    """One document written 1, 2, 3, ... at w:majority and read at majority in a causal
    session: the history `rsdrill soak` checks for linearizability and monotonic reads."""

    interval: Duration = 0.05
    timeout: Duration = 0.25


def _txn_len(value: Any) -> Any:
    """`1-4` (or one number) as the (shortest, longest) micro-ops a transaction has."""
    if isinstance(value, int):
        return (value, value)
    if isinstance(value, str) and re.fullmatch(r"\s*\d+\s*-\s*\d+\s*", value):
        low, high = (int(part) for part in value.split("-"))
        return (low, high)
    return value


class TransactionsProbe(Strict):
    """Multi-document transactions for the anomaly checker (Elle's list-append workload):
    snapshot reads, majority writes, several clients at once."""

    workload: Literal["list-append"] = "list-append"
    keys: int = Field(8, ge=1, le=10_000, description="the lists the transactions append to")
    txn_len: Annotated[
        tuple[int, int],
        BeforeValidator(_txn_len),
        WithJsonSchema(
            {
                "anyOf": [
                    {"type": "string", "pattern": r"^\s*\d+\s*-\s*\d+\s*$"},
                    {"type": "integer", "minimum": 1},
                    {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2},
                ]
            }
        ),
    ] = Field((1, 4), description="micro-ops per transaction: `1-4`, or one number")
    clients: int = Field(2, ge=1, le=32, description="transactions run at once")
    model: Literal["snapshot-isolation", "serializable"] = Field(
        "snapshot-isolation",
        description="what the transactions promise: MongoDB's snapshot isolation allows write "
        "skew (G2-item); serializable forbids it too",
    )
    interval: Duration = 0.05
    timeout: Duration = 1.0

    @model_validator(mode="after")
    def _lengths(self) -> TransactionsProbe:
        low, high = self.txn_len
        if not 1 <= low <= high <= 64:
            raise FieldProblem(("txn_len",), "write it as LOW-HIGH with 1 <= LOW <= HIGH <= 64")
        return self


class CausalProbe(Strict):
    """Causally consistent sessions, one per client, each writing its own document and reading
    every client's: checked for read-your-writes, monotonic reads and writes, and writes that
    follow reads (analysis/causal.py), across whatever the faults do."""

    clients: int = Field(3, ge=2, le=16, description="sessions, each with its own document")
    read_preference: Literal[
        "primary", "primaryPreferred", "secondary", "secondaryPreferred", "nearest"
    ] = Field("secondaryPreferred", description="where the reads go (a secondary tests most)")
    read_concern: Literal["majority", "local"] = Field(
        "majority", description="majority: what MongoDB's causal guarantees need"
    )
    write_concern: WriteConcernW = Field(
        "majority", description="majority: what MongoDB's causal guarantees need"
    )
    interval: Duration = 0.05
    timeout: Duration = 1.0


class Probes(Strict):
    availability: AvailabilityProbe | None = AvailabilityProbe()
    failover: FailoverProbe | None = FailoverProbe()
    recovery: RecoveryProbe | None = RecoveryProbe()
    lag: LagProbe | None = LagProbe()
    durability: DurabilityProbe | None = DurabilityProbe()
    load: LoadProbe | None = None
    checks: dict[CheckName, CheckProbe] = Field(
        default_factory=dict,
        description="steady-state checks of your own (HTTP, command, query, plugin), by name",
    )
    consistency: RegisterProbe | None = Field(
        None, description="the register the soak checks (linearizability, monotonic reads)"
    )
    transactions: TransactionsProbe | None = Field(
        None, description="list-append transactions, checked for anomalies as Elle does"
    )
    causal: CausalProbe | None = Field(
        None, description="causally consistent sessions, checked for the causal guarantees"
    )

    @property
    def transactions_model(self) -> Literal["snapshot-isolation", "serializable"]:
        """What the transactions probe's history is judged against (its default without it)."""
        return self.transactions.model if self.transactions else "snapshot-isolation"

    @property
    def ledger_shares_writes(self) -> bool:
        """The durability ledger is the availability probe's writes: they make the same
        promise (write concern and journal) and `share_writes` allows it."""
        d, a = self.durability, self.availability
        return (d is not None and d.share_writes and a is not None and a.writes
                and (a.write_concern, a.journal) == (d.write_concern, d.journal))  # fmt: skip

    def records(self) -> set[str]:
        """The names of the probes whose ops this configuration records (see
        analysis/sources.py)."""
        availability = self.availability
        made = {
            "write": availability is not None and availability.writes,
            "read": availability is not None and availability.reads,
            "raw_write": availability is not None
            and availability.writes
            and availability.raw_writes,
            "failover": self.failover is not None,
            "recovery": self.recovery is not None,
            "lag": self.lag is not None,
            "ledger": self.durability is not None,
            "load": self.load is not None,
            "register": self.consistency is not None,
            "txn": self.transactions is not None,
            "causal": self.causal is not None,
            # The probe of rsdrill's own process runs in every run.
            STALL_PROBE: True,
        }
        return {name for name, on in made.items() if on} | {f"check:{n}" for n in self.checks}
