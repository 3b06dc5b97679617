"""The experiment file: what to break, how to measure it, and what must hold.

These pydantic models are the edge between a user's YAML and the engine. Every model forbids
unknown fields, so a misspelt key is an error with a did-you-mean (see `loader.py`), never
silently ignored. Durations are written as `20ms`, `5s`, `1.5s`, `2m`, `1m30s` or a number of
seconds, and held as float seconds.
"""

from __future__ import annotations

import copy
import itertools
import math
import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationError,
    WithJsonSchema,
    model_validator,
)

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(value: Any) -> float:
    """`20ms`, `5s`, `1.5s`, `2m`, `1m30s`, `1h` or a number of seconds → seconds (>= 0)."""
    if isinstance(value, bool):
        raise ValueError("a duration, not true/false")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip().replace(" ", "")
        parts = _DURATION.findall(text)
        if not parts or "".join(n + u for n, u in parts) != text:
            raise ValueError(f"{value!r} is not a duration like 20ms, 5s, 1m30s")
        seconds = sum(float(n) * _UNIT_S[u] for n, u in parts)
    else:
        raise ValueError(f"{value!r} is not a duration like 20ms, 5s, 1m30s")
    if not math.isfinite(seconds):
        raise ValueError("a duration must be finite")
    if seconds < 0:
        raise ValueError("a duration cannot be negative")
    return seconds


def format_duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    return f"{seconds:g}s"


Duration = Annotated[
    float,
    BeforeValidator(parse_duration),
    PlainSerializer(format_duration, return_type=str),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "pattern": r"^(\d+(\.\d+)?(ms|s|m|h))+$"},
                {"type": "number", "minimum": 0},
            ],
            "description": "a duration: 20ms, 5s, 1.5s, 2m, 1m30s, or a number of seconds",
        }
    ),
]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FieldProblem(ValueError):
    """A model validator's complaint about one of the model's fields.

    `at` is the field's location relative to the model, so the loader can point at that
    field's line in the file instead of at the whole model; `problem` is the message alone.
    """

    def __init__(self, at: tuple[str | int, ...], problem: str) -> None:
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in at).lstrip(".")
        super().__init__(f"{where}: {problem}")
        self.at = at
        self.problem = problem


# -- target --------------------------------------------------------------------------------------


class LocalMember(Strict):
    """A member running on this machine that rsdrill may kill, freeze and restart."""

    host: str = Field(pattern=r"^[^:\s]+:\d+$", description="host:port the member listens on")
    start: str = Field(description="the shell command that starts the member (used to restart)")
    dbpath: str | None = Field(None, description="its data directory (volume: wipe empties it)")


class Target(Strict):
    """Where the replica set is: a sandbox rsdrill builds, or processes already running here."""

    platform: Literal["sandbox", "local"] = Field(
        description="sandbox: rsdrill starts a replica set for the run; "
        "local: existing member processes on this machine"
    )
    topology: Literal["rs1", "rs3", "psa"] = Field(
        "rs3", description="sandbox builds it; local checks the set has that shape"
    )
    uri: str | None = Field(None, description="local: the connection string (${VAR} allowed)")
    members: tuple[LocalMember, ...] = ()
    engine: Literal["auto", "emulator", "mongod"] = "auto"
    election_timeout: Duration | None = Field(None, description="electionTimeoutMillis (sandbox)")
    heartbeat_interval: Duration | None = Field(None, description="heartbeatIntervalMillis")
    oplog_size_mb: int | None = Field(None, gt=0)
    initial_sync_mb_per_s: float | None = Field(None, gt=0)
    port_base: int | None = Field(
        None, ge=1, le=65000, description="sandbox: first port (default: free ports are found)"
    )
    data_mb: int = Field(0, ge=0, description="sandbox: preload this much data before the run")
    keep: bool = Field(False, description="sandbox: leave it running after the run")

    @model_validator(mode="after")
    def _platform_fields(self) -> Target:
        if self.platform == "local":
            if not self.members:
                raise FieldProblem(
                    ("members",), "platform local needs `members` (host, start, dbpath)"
                )
            if not self.uri:
                raise FieldProblem(("uri",), "platform local needs `uri`")
        elif self.members or self.uri:
            raise FieldProblem(
                ("members" if self.members else "uri",),
                "platform sandbox builds its own set: drop `uri` and `members`",
            )
        return self


# -- probes --------------------------------------------------------------------------------------

WriteConcernW = int | Literal["majority"]


class AvailabilityProbe(Strict):
    """A write loop and a read loop, each recording every attempt."""

    interval: Duration = 0.02
    timeout: Duration = Field(0.25, description="socket, connect and server-selection timeout")
    write_concern: WriteConcernW = "majority"
    journal: bool | None = None
    retries: bool = Field(False, description="off: the raw gap; on: what an application sees")
    read_preference: Literal[
        "primary", "primaryPreferred", "secondary", "secondaryPreferred", "nearest"
    ] = "primary"
    reads: bool = True
    writes: bool = True


class FailoverProbe(Strict):
    """A direct connection to every member polling hello: who is primary, from when writable."""

    interval: Duration = 0.02
    timeout: Duration = 0.25


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


class LoadProbe(Strict):
    """A YCSB-like workload whose latencies the analyzers turn into percentiles."""

    workload: Literal["a", "b"] = Field("a", description="a: 50/50 read/update; b: 95/5")
    rate: float = Field(200, gt=0, description="operations per second, all threads together")
    threads: int = Field(4, ge=1, le=64)
    records: int = Field(1000, ge=1)
    record_bytes: int = Field(100, ge=1)
    distribution: Literal["zipfian", "uniform"] = "zipfian"
    timeout: Duration = 2.0
    write_concern: WriteConcernW = 1


class Probes(Strict):
    availability: AvailabilityProbe | None = AvailabilityProbe()
    failover: FailoverProbe | None = FailoverProbe()
    recovery: RecoveryProbe | None = RecoveryProbe()
    lag: LagProbe | None = LagProbe()
    durability: DurabilityProbe | None = DurabilityProbe()
    load: LoadProbe | None = None


# -- faults --------------------------------------------------------------------------------------

Role = Literal["primary", "secondary", "arbiter"]


class SelectMember(Strict):
    member: str = Field(pattern=r"^[^:\s]+:\d+$")


class SelectCount(Strict):
    count: int = Field(ge=1)
    role: Literal["any", "secondary", "data"] = Field(
        "any", description="any member, secondaries only, or data-bearing members"
    )


Selection = Role | SelectMember | SelectCount


class Restart(Strict):
    """host-kill: how the member comes back (as an HA restart would bring a host back)."""

    after: Duration | None = Field(
        None, description="restart this long after the kill (default: the fault's duration)"
    )
    volume: Literal["keep", "wipe"] = Field(
        "keep", description="keep: restart on the data (catch up); wipe: full initial sync"
    )


class Fault(Strict):
    at: Duration = Field(description="when, from the start of the probes")
    kind: Literal["host-kill", "host-freeze", "stepdown"]
    select: Selection = "primary"
    duration: Duration | None = Field(
        None, description="how long the fault lasts before it is reverted"
    )
    restart: Restart | Literal[False] = Field(
        default_factory=Restart, description="host-kill only; false: never restart"
    )
    secondary_catch_up: Duration = Field(10.0, description="stepdown: secondaryCatchUpPeriodSecs")
    force: bool = Field(False, description="stepdown: step down even without a caught-up heir")

    @model_validator(mode="after")
    def _kind_fields(self) -> Fault:
        if self.kind == "host-freeze" and self.duration is None:
            raise FieldProblem(
                ("duration",), "host-freeze needs a `duration` (then the member is resumed)"
            )
        if self.kind == "host-kill":
            if self.restart and self.restart.after is None and self.duration is None:
                raise FieldProblem(
                    ("duration",),
                    "host-kill needs `duration` or `restart.after` (or restart: false)",
                )
        elif "restart" in self.model_fields_set:
            raise FieldProblem(("restart",), f"`restart` applies to host-kill, not {self.kind}")
        if (
            self.kind == "stepdown"
            and self.duration is not None
            and (self.duration < self.secondary_catch_up)
        ):
            raise FieldProblem(
                ("duration",),
                "stepdown: `duration` (the stepdown period) must be at least `secondary_catch_up`",
            )
        return self

    @property
    def revert_after(self) -> float | None:
        """Seconds from injection to revert, or None when the fault is not reverted."""
        if self.kind == "host-kill":
            if self.restart is False:
                return None
            return self.restart.after if self.restart.after is not None else self.duration
        if self.kind == "stepdown":
            return None
        return self.duration


# -- observation and SLOs ------------------------------------------------------------------------


class Observe(Strict):
    after_revert: Duration = Field(
        30.0, description="keep measuring this long after the last revert"
    )
    until_recovered: bool = Field(
        True, description="stop early once every member is healthy again (after at least 2 s)"
    )
    steady_state: Duration = Field(
        2.0, description="probes run at least this long before the first fault"
    )


class Guards(Strict):
    """Blast-radius guards checked before anything is broken (see `rsdrill/engine/guards.py`)."""

    allow_quorum_loss: bool = Field(
        False, description="run even if the faults leave fewer than a majority of voters up"
    )
    allow_oplog_overrun: bool = Field(
        False, description="run even if a member stays down longer than the oplog window"
    )
    max_lag_before_start: Duration = Field(
        10.0, description="refuse to start while a secondary lags more than this"
    )


def _abort_condition(text: str) -> str:
    from rsdrill.engine.abort import parse_condition

    parse_condition(text)
    return text


AbortCondition = Annotated[
    str,
    AfterValidator(_abort_condition),
    Field(description='e.g. "no_primary_s > 60", "write_unavailable_s > 30"'),
]


# How many members a `count:` selection can draw from, by role, while the set is healthy.
_MEMBERS_BY_ROLE: dict[str, dict[str, int]] = {
    "rs1": {"any": 1, "secondary": 0, "data": 1},
    "rs3": {"any": 3, "secondary": 2, "data": 3},
    "psa": {"any": 3, "secondary": 1, "data": 2},
}

SLO_PATTERN = r"^\s*(<=|>=|==|!=|<|>)\s*(-?\d+(\.\d+)?)\s*$"


MatrixValue = bool | int | float | str


class MatrixTable(Strict):
    """How to print a sweep's results: one parameter down, optionally one across."""

    rows: str = Field(description="the parameter whose values are the rows")
    columns: str | None = Field(None, description="the parameter whose values are the columns")
    metric: str = Field(description="what each cell shows, e.g. recovery_s.max")


class Matrix(Strict):
    """Run the experiment once per combination of parameter values (a sweep)."""

    parameters: dict[str, Annotated[tuple[MatrixValue, ...], Field(min_length=1)]] = Field(
        min_length=1,
        description="dotted path into this file → values, e.g. target.data_mb: [10, 40]",
    )
    table: MatrixTable | None = None

    @model_validator(mode="after")
    def _table_names_parameters(self) -> Matrix:
        from rsdrill.analysis.slo import known_metric

        if self.table is not None and not known_metric(self.table.metric):
            raise FieldProblem(("table", "metric"), f"unknown metric {self.table.metric!r}")
        if self.table is not None:
            for axis in ("rows", "columns"):
                name = getattr(self.table, axis)
                if name is not None and name not in self.parameters:
                    raise FieldProblem(("table", axis), f"{name!r} is not one of the parameters "
                                       f"({', '.join(self.parameters)})")  # fmt: skip
        return self


def set_path(document: dict[str, Any], path: str, value: Any) -> None:
    """Set `a.b.0.c` in nested dicts and lists (dicts created where missing)."""
    parts = path.split(".")
    node: Any = document
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                raise ValueError(f"{path}: no item {part} in a list of {len(node)}")
            if last:
                node[int(part)] = value
            else:
                node = node[int(part)]
        elif isinstance(node, dict):
            if last:
                node[part] = value
            else:
                if not isinstance(node.get(part), dict | list):
                    node[part] = {}
                node = node[part]
        else:
            raise ValueError(f"{path}: {'.'.join(parts[:i])} is not a mapping or a list")


class Experiment(Strict):
    """One experiment file."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    description: str = ""
    target: Target
    probes: Probes = Probes()
    faults: tuple[Fault, ...] = Field(min_length=1)
    observe: Observe = Observe()
    slo: dict[str, Annotated[str, Field(pattern=SLO_PATTERN)]] = Field(
        default_factory=dict,
        description='metric → condition, e.g. write_unavailable_s: "<= 15"',
    )
    matrix: Matrix | None = None
    guards: Guards = Guards()
    abort_on: tuple[AbortCondition, ...] = Field(
        (), description="stop injecting, revert and abort (exit 3) as soon as one holds"
    )

    def variants(self) -> list[tuple[dict[str, MatrixValue], Experiment]]:
        """Each combination of the matrix's values and the experiment it makes (no matrix)."""
        if self.matrix is None:
            return [({}, self)]
        base = self.model_dump(mode="json", exclude={"matrix"}, exclude_defaults=True)
        names = list(self.matrix.parameters)
        out = []
        for values in itertools.product(*self.matrix.parameters.values()):
            document = copy.deepcopy(base)
            for name, value in zip(names, values, strict=True):
                set_path(document, name, value)
            out.append((dict(zip(names, values, strict=True)), Experiment.model_validate(document)))
        return out

    @model_validator(mode="after")
    def _matrix_variants_are_valid(self) -> Experiment:
        if self.matrix is None:
            return self
        for name, values in self.matrix.parameters.items():
            for value in values:
                document = self.model_dump(mode="json", exclude={"matrix"}, exclude_defaults=True)
                try:
                    set_path(document, name, value)
                    Experiment.model_validate(document)
                except (ValueError, ValidationError) as exc:
                    first = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else exc
                    raise FieldProblem(("matrix", "parameters", name),
                                       f"value {value!r} does not make a valid experiment: "
                                       f"{first}") from None  # fmt: skip
        return self

    @model_validator(mode="after")
    def _abort_conditions_are_measured(self) -> Experiment:
        from rsdrill.engine.abort import parse_condition, unmeasurable

        for i, text in enumerate(self.abort_on):
            problem = unmeasurable(parse_condition(text).metric, self.probes)
            if problem:
                raise FieldProblem(("abort_on", i), problem)
        return self

    @model_validator(mode="after")
    def _selections_fit_topology(self) -> Experiment:
        topology = self.target.topology
        for i, fault in enumerate(self.faults):
            sel = fault.select
            if sel == "arbiter" and topology != "psa" and self.target.platform == "sandbox":
                raise FieldProblem(
                    ("faults", i, "select"), f"select arbiter, but {topology} has no arbiter"
                )
            if sel == "secondary" and topology == "rs1":
                raise FieldProblem(
                    ("faults", i, "select"), "select secondary, but rs1 has no secondary"
                )
            if isinstance(sel, SelectCount):
                available = _MEMBERS_BY_ROLE[topology][sel.role]
                if sel.count > available:
                    raise FieldProblem(
                        ("faults", i, "select", "count"),
                        f"select count {sel.count} ({sel.role}), but {topology} has "
                        f"{available} such member{'' if available == 1 else 's'}",
                    )
        return self
