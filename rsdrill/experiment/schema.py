"""The experiment file: what to break, how to measure it, and what must hold.

These pydantic models are the edge between a user's YAML and the engine. Every model forbids
unknown fields, so a misspelt key is an error with a did-you-mean (see `loader.py`), never
silently ignored. Durations are written as `20ms`, `5s`, `1.5s`, `2m`, `1m30s` or a number of
seconds, and held as float seconds.
"""

from __future__ import annotations

import copy
import functools
import itertools
from typing import TYPE_CHECKING, Annotated, Any, Literal, Protocol, Union, cast

from pydantic import (
    AfterValidator,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    create_model,
    model_validator,
)

from rsdrill import registry
from rsdrill.domains import planned
from rsdrill.experiment.catalog import available_kinds, described, opt_in_problem
from rsdrill.experiment.integrations import GrafanaSection, Notification
from rsdrill.experiment.probes import Probes
from rsdrill.experiment.random_schedule import RandomFaults
from rsdrill.experiment.stop_sources import CloudWatchCondition, PrometheusCondition
from rsdrill.experiment.target import Target
from rsdrill.faults import (
    FAULT_CLASSES,
    KIND_NAMES,
    KINDS,
    FaultBase,
    HostKillFault,
    Restart,
    SelectCount,
    SelectDomain,
    Selection,
    SelectMember,
    SelectRouter,
    SelectShard,
    describe_selection,
)
from rsdrill.fields import (
    FROM_FILE,
    Duration,
    FieldProblem,
    Strict,
    format_duration,
    nested_problem,
    parse_duration,
)
from rsdrill.layout import member_count
from rsdrill.registry import member_source

if TYPE_CHECKING:
    from rsdrill.faults import Fault

__all__ = [
    "FROM_FILE",
    "Duration",
    "Fault",
    "FieldProblem",
    "Restart",
    "SelectCount",
    "SelectDomain",
    "SelectMember",
    "SelectRouter",
    "SelectShard",
    "Selection",
    "Strict",
    "describe_selection",
    "format_duration",
    "parse_duration",
]

# -- target: experiment/target.py ---------------------------------------------------------


class PlatformChecks(Protocol):
    """What the model asks of a platform once a file is read (the whole interface is
    `platforms/base.py: Platform`)."""

    def check_experiment(self, exp: Experiment) -> None:
        """Refuse (raise FieldProblem) what this platform cannot carry out, before any run."""
        ...


# -- faults --------------------------------------------------------------------------------------


FaultKind = Literal[KIND_NAMES]  # type: ignore[valid-type]  # names from rsdrill.faults at run time

_FAULT_SECTIONS = {n: p.fault_options for n, p in described().items() if p.fault_options}


def _kind_model(kind: str) -> type[FaultBase]:
    """A kind's model as a file's faults are validated: its class (rsdrill/faults/) with one
    section per registered platform that has fault options."""
    cls = FAULT_CLASSES[kind]
    title = "".join(part.capitalize() for part in kind.split("-"))
    fields: dict[str, Any] = {
        "kind": (Literal[kind], Field(description=cls.SPEC.meaning)),
        **{name: (options | None, None) for name, options in _FAULT_SECTIONS.items()},
    }
    model = create_model(
        title if title.endswith("Fault") else f"{title}Fault",
        __base__=cls,
        __doc__=cls.SPEC.meaning,
        __module__=__name__,
        **fields,
    )
    return cast("type[FaultBase]", model)  # a subclass of cls


FAULT_MODELS: dict[str, type[FaultBase]] = {kind: _kind_model(kind) for kind in KIND_NAMES}
"""One model per fault kind, each with only the fields that apply to it."""

if not TYPE_CHECKING:
    Fault = Annotated[Union[tuple(FAULT_MODELS.values())], Field(discriminator="kind")]  # noqa: UP007


@functools.cache
def _fault_adapter() -> TypeAdapter[Fault]:
    # Built on first use: most files draw no random faults, and a CLI start pays for each model.
    return TypeAdapter(Fault)


def make_fault(**fields: Any) -> Fault:
    """A fault of the kind `fields` names, validated as a file's fault is."""
    return _fault_adapter().validate_python(fields)


class Step(Strict):
    """A command of the user's run at a moment of the timeline, e.g. a backup before the
    disaster and the restore after it (a disaster-recovery drill). It runs with the shell, with
    RSDRILL_URI, RSDRILL_OUT and (sandbox) RSDRILL_SANDBOX in its environment; its output goes
    to `<out>/steps/<name>.log`. A step that fails or outlasts its timeout ends the run with an
    error (every fault reverted)."""

    at: Duration = Field(description="when, from the start of the probes")
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    run: str = Field(min_length=1, description="the shell command")
    marks: Literal["backup", "restore", "none"] = Field(
        "none",
        description="backup: the data the restore brings back is from here (RPO); "
        "restore: the set is brought back by this step (RTO)",
    )
    timeout: Duration = Field(1800.0, gt=0, description="the step fails after this long")


class ForceReconfig(Strict):
    after: Duration = Field(
        gt=0,
        description="from the moment the faults leave fewer than a majority of the voting "
        "members up (the decision and the runbook's time: MongoDB elects no primary "
        "meanwhile)",
    )


class Recovery(Strict):
    """MongoDB's procedure for a replica set that lost its voting majority, carried out by the
    run: the survivors reconfigured with `force: true` (they elect a primary among themselves),
    and once the faults are reverted the lost members, back and REMOVED, added again one at a
    time (without a vote until they are SECONDARY, rolling back what the survivors never had).
    See rsdrill/engine/forced_reconfig.py."""

    force_reconfig: ForceReconfig


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
    stop_balancer: bool = Field(
        False,
        description="sharded: stop the balancer (balancerStop on a router) after the guards "
        "and before the first fault, so no chunk moves while the faults run, and start it "
        "again after the run (or `rsdrill recover` after a crash) if it was on; one already "
        "off is left off",
    )


def _abort_condition(text: str) -> str:
    from rsdrill.analysis.abort import parse_condition

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
    "rs5": {"any": 5, "secondary": 4, "data": 5},
    "psa": {"any": 3, "secondary": 1, "data": 2},
    "standalone": {"any": 1, "secondary": 0, "data": 1},
}

SLO_PATTERN = r"^\s*(<=|>=|==|!=|<|>)\s*(-?\d+(\.\d+)?)\s*$"


def _known_metrics(slo: dict[str, str]) -> dict[str, str]:
    from rsdrill.analysis.slo import unknown_metric_problem

    for name in slo:
        if (problem := unknown_metric_problem(name)) is not None:
            raise FieldProblem((name,), problem, about_key=True)
    return slo


SloConditions = Annotated[
    dict[str, Annotated[str, Field(pattern=SLO_PATTERN)]], AfterValidator(_known_metrics)
]
"""`slo:`: metric → condition; every name one the analyzers compute (see analysis/slo.py)."""


MatrixValue = bool | int | float | str


class MatrixTable(Strict):
    """How to print a sweep's results: one parameter down, optionally one across."""

    rows: str = Field(description="the parameter whose values are the rows")
    columns: str | None = Field(None, description="the parameter whose values are the columns")
    metric: str | None = Field(None, description="what each cell shows, e.g. recovery_s.max")
    metrics: tuple[str, ...] = Field(
        (),
        description="instead of metric: one column per metric (under each value of columns), "
        "e.g. [lost_acknowledged_writes, write_unavailable_s] (RPO and RTO per setting)",
    )

    @model_validator(mode="after")
    def _one_way_to_name_the_metrics(self) -> MatrixTable:
        if (self.metric is None) == (not self.metrics):
            raise FieldProblem(("metric",), "give either metric (one per cell) or metrics (a "
                               "column each)")  # fmt: skip
        return self

    @property
    def shown(self) -> tuple[str, ...]:
        """The metrics the table shows."""
        return (self.metric,) if self.metric is not None else self.metrics


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

        for i, metric in enumerate(self.table.shown if self.table is not None else ()):
            if not known_metric(metric):
                at = (
                    ("table", "metric")
                    if self.table and self.table.metric
                    else ("table", "metrics", i)
                )
                raise FieldProblem(at, f"unknown metric {metric!r}")  # fmt: skip
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


# A file may not give the fields that loading fills in (FROM_FILE: the loader's context).
# Set from `faults: {random}` when it is drawn; a file never writes it.
DRAWN_FIELDS = ("random_faults",)


class Experiment(Strict):
    """One experiment file."""

    @model_validator(mode="before")
    @classmethod
    def _sharded_audit_off(cls, data: Any) -> Any:
        # The data audit compares one set's members; a sharded target has no audit yet, and
        # needs no `audit: off` to say so.
        if isinstance(data, dict) and "audit" not in data:
            target = data.get("target")
            if isinstance(target, dict) and target.get("topology") == "sharded":
                return {**data, "audit": "off"}
        return data

    @model_validator(mode="before")
    @classmethod
    def _draw_random_faults(cls, data: Any, info: ValidationInfo) -> Any:
        from rsdrill.experiment.random_schedule import expand

        if (info.context or {}).get(FROM_FILE) and isinstance(data, dict):
            for name in DRAWN_FIELDS:
                if name in data:
                    # Accepted, it stood beside a list of faults, and `--seed` replaced them.
                    problem = "not a key of a file: a random schedule is `faults: {random: ...}`"
                    raise FieldProblem((name,), problem, about_key=True)
        return expand(data, make_fault, check=cls.model_validate)

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    description: str = ""
    target: Target
    probes: Probes = Probes()
    faults: tuple[Fault, ...] = Field(
        min_length=1,
        description="the faults, or {random: {seed, kinds, count, within, duration, select}}: "
        "a schedule drawn from a seed (see rsdrill/experiment/random_schedule.py)",
    )
    random_faults: RandomFaults | None = Field(
        None,
        description="set from `faults: {random}`: the spec the faults were drawn from, "
        "with its seed",
    )
    observe: Observe = Observe()
    audit: Literal["off", "quick", "full"] = Field(
        "quick",
        description="after the run, compare the members' data (dbHash, then which documents "
        "differ) and account for their rollbacks: quick, the databases rsdrill wrote "
        "(rsdrill_*); full, every one but admin, config and local",
    )
    slo: SloConditions = Field(
        default_factory=dict,
        description='metric → condition, e.g. write_unavailable_s: "<= 15"',
    )
    steps: tuple[Step, ...] = Field(
        (), description="the user's own commands on the timeline (backup, restore, ...)"
    )
    matrix: Matrix | None = None
    guards: Guards = Guards()
    recovery: Recovery | None = Field(
        None, description="the runbook for a lost voting majority (a forced reconfig)"
    )
    abort_on: tuple[AbortCondition | PrometheusCondition | CloudWatchCondition, ...] = Field(
        (),
        description="stop injecting, revert and abort (exit 3) as soon as one holds: rsdrill's "
        "own conditions, or the team's monitoring (a Prometheus query, a CloudWatch alarm)",
    )
    notify: tuple[Notification, ...] = Field(
        (), description="tell a webhook, Slack or PagerDuty of the run's start and verdict"
    )
    grafana: GrafanaSection | None = Field(
        None, description="annotate each fault's window and the verdict on Grafana"
    )

    def with_seed(self, seed: int) -> Experiment:
        """The same experiment with its random schedule drawn from `seed` (`--seed`)."""
        from rsdrill.experiment.random_schedule import reseeded

        if self.random_faults is None:
            raise ValueError("--seed needs `faults: {random: ...}` in the experiment")
        base = self.model_dump(mode="json", exclude={"faults", "random_faults"},
                               exclude_defaults=True)  # fmt: skip
        return Experiment.model_validate(reseeded(base, self.random_faults, seed))

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
    def _abort_conditions_are_measured(self) -> Experiment:
        from rsdrill.analysis.abort import parse_condition, unmeasurable

        for i, text in enumerate(self.abort_on):
            if not isinstance(text, str):
                continue  # the team's monitoring: asked by `rsdrill check` before the run
            problem = unmeasurable(parse_condition(text).metric, self.probes.records())
            if problem:
                raise FieldProblem(("abort_on", i), problem)
        return self

    @model_validator(mode="after")
    def _recovery_has_a_majority_to_recover(self) -> Experiment:
        if self.recovery is None:
            return self
        if self.target.topology in ("rs1", "standalone", "sharded"):
            raise FieldProblem(
                ("recovery",),
                "a forced reconfig needs a replica set whose "
                f"survivors can be reconfigured, not {self.target.topology}",
            )
        if not self.guards.allow_quorum_loss:
            raise FieldProblem(("recovery", "force_reconfig"), "recovers a lost voting "
                               "majority: set `guards: {allow_quorum_loss: true}` for faults "
                               "that take it")  # fmt: skip
        return self

    @model_validator(mode="after")
    def _read_tags_name_members(self) -> Experiment:
        """On a set rsdrill builds, a tag set no member holds would select no member: every
        read would fail, whatever the faults."""
        probe = self.probes.availability
        if probe is None or member_source(self.target.platform) != "built":
            return self
        held = {("zone", z) for z in self.target.zones}
        for i, tags in enumerate(probe.read_tags):
            missing = [f"{k}: {v}" for k, v in tags.items() if (k, v) not in held]
            if missing:
                has = ", ".join(f"zone: {z}" for z in dict.fromkeys(self.target.zones))
                raise FieldProblem(("probes", "availability", "read_tags", i), f"no member has "
                                   f"the tag {missing[0]} (the members' tags: "
                                   f"{has or 'none: give them zones, target.zones'})")  # fmt: skip
        return self

    @model_validator(mode="after")
    def _steps_are_distinct(self) -> Experiment:
        names = [step.name for step in self.steps]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise FieldProblem(("steps", i, "name"), f"another step is named {name!r}")
        for i, fault in enumerate(self.faults):
            if KINDS[fault.kind].disaster and not any(s.marks == "restore" for s in self.steps):
                raise FieldProblem(
                    ("faults", i, "kind"),
                    f"{fault.kind} needs a step with `marks: restore` (the set stays down "
                    "otherwise)",
                )
        return self

    @model_validator(mode="after")
    def _platform_supports_faults(self) -> Experiment:
        platform = self.target.platform
        carrier = cast("PlatformChecks", registry.platform(platform))
        # A platform carries a kind out only with a way and an injector for it.
        available = available_kinds(platform)
        for i, fault in enumerate(self.faults):
            for section in _FAULT_SECTIONS:
                if section != platform and getattr(fault, section) is not None:
                    raise FieldProblem(
                        ("faults", i, section), f"{section} options on a {platform} target"
                    )
            unavailable = KINDS[fault.kind].unavailable
            if unavailable and fault.kind not in available:
                raise FieldProblem(
                    ("faults", i, "kind"),
                    f"{fault.kind} {unavailable.format(platform=platform)}",
                )
        carrier.check_experiment(self)
        for i, fault in enumerate(self.faults):
            if fault.kind not in available:
                raise FieldProblem(("faults", i, "kind"), f"{fault.kind} is not available on "
                                   f"{platform} (it has: {', '.join(available)})")  # fmt: skip
            if (problem := opt_in_problem(platform, fault)) is not None:
                raise FieldProblem(("faults", i, "kind"), problem)
        return self

    def records(self) -> set[str]:
        """What the run records: its probes' ops, `data-loss` faults and marked steps (the
        names of analysis/sources.py)."""
        records = self.probes.records()
        # A disaster's name is its record's (analysis/sources.py: the disaster-recovery ones).
        records.update(fault.kind for fault in self.faults if KINDS[fault.kind].disaster)
        records.update(f"step:{step.marks}" for step in self.steps if step.marks != "none")
        if self.audit != "off":
            records.add("audit")
        return records

    @model_validator(mode="after")
    def _slos_are_measured(self) -> Experiment:
        from rsdrill.analysis.slo import not_applicable_reason
        from rsdrill.analysis.sources import missing_source

        standalone = self.target.topology == "standalone"
        records = self.records()
        for metric in self.slo:
            if (reason := not_applicable_reason(metric, standalone=standalone)) is not None:
                raise FieldProblem(("slo", metric), reason, about_key=True)
            if (source := missing_source(metric, records)) is not None:
                raise FieldProblem(("slo", metric), f"measured by {source.what}, which this "
                                   "experiment turns off", about_key=True)  # fmt: skip
        return self

    @model_validator(mode="after")
    def _selections_fit_topology(self) -> Experiment:
        topology = self.target.topology
        from rsdrill.analysis.slo import SET_METRIC

        if topology == "sharded":
            return self._sharded_selections()
        if self.guards.stop_balancer:
            raise FieldProblem(("guards", "stop_balancer"), "the balancer is a sharded "
                               f"cluster's (topology: sharded); this one is {topology}, "
                               "which has none to stop")  # fmt: skip
        for metric in self.slo:
            if SET_METRIC.match(metric):
                raise FieldProblem(("slo", metric), f"a sharded target's figure; this one is "
                                   f"{topology}", about_key=True)  # fmt: skip
        for i, fault in enumerate(self.faults):
            sel = fault.select
            if isinstance(sel, SelectShard | SelectRouter) or sel == "config-primary":
                raise FieldProblem(("faults", i, "select"), f"{describe_selection(sel)}: a sharded "
                                   f"target's parts (topology: sharded); this one is "
                                   f"{topology}")  # fmt: skip
            if isinstance(sel, SelectDomain) and member_source(self.target.platform) == "built":
                placed = planned(self.target.zones, member_count(topology))
                try:
                    domain = sel.among(placed)
                except ValueError as exc:
                    hint = "" if self.target.zones else ": give the members zones (target.zones)"
                    raise FieldProblem(("faults", i, "select", "domains"),
                                       f"{exc}{hint}") from None  # fmt: skip
                if not any(domain.matches(p) for p in placed):
                    raise FieldProblem((*("faults", i, "select"), sel.key), f"no member is in "
                                       f"{sel}: " + (f"target.zones has "
                                       f"{', '.join(dict.fromkeys(self.target.zones))}"
                                       if self.target.zones else "give the members zones "
                                       "(target.zones)"))  # fmt: skip
            if (sel == "arbiter" and topology != "psa"
                    and member_source(self.target.platform) == "built"):  # fmt: skip
                raise FieldProblem(
                    ("faults", i, "select"), f"select arbiter, but {topology} has no arbiter"
                )
            why = KINDS[fault.kind].replica_set_only
            if why and topology == "standalone":
                raise FieldProblem(
                    ("faults", i, "kind"), f"{fault.kind} needs a replica set: {why}"
                )  # fmt: skip
            if sel == "secondary" and topology in ("rs1", "standalone"):
                raise FieldProblem(
                    ("faults", i, "select"), f"select secondary, but {topology} has no secondary"
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

    def _sharded_domain(self, i: int, fault: Fault, sel: SelectDomain) -> None:
        """A domain of a sharded target: named (each set has its own majority); cut off, not
        yet (only killed); on a sandbox, one its zones hold (every set has every zone)."""
        where = ("faults", i, "select")
        if sel.domains is not None:
            raise FieldProblem((*where, "domains"), "each set of a sharded target has its own "
                               "majority: name the zone (select: {zone: NAME})")  # fmt: skip
        if fault.out_of_reach():  # its members cut off, each set's links to the others kept
            raise FieldProblem(("faults", i, "way"), "a zone of a sharded target is killed "
                               "(way: kill); cutting it off is not there yet")  # fmt: skip
        if member_source(self.target.platform) != "built":
            return
        if not any(sel.matches(p) for p in planned(self.target.zones, 3)):
            held = ", ".join(dict.fromkeys(self.target.zones))
            raise FieldProblem((*where, sel.key), f"no member is in {sel}: " + (
                f"target.zones has {held}" if held else "give the members zones "
                "(target.zones)"))  # fmt: skip

    def _sharded_selections(self) -> Experiment:
        from rsdrill.analysis.slo import SET_METRIC

        target = self.target
        # A built cluster's shape is known now; one that is found (from its routers) is
        # checked by `sharded_selection_problems` once the run has found it.
        built = member_source(target.platform) == "built"
        names = [f"shard{i}" for i in range(target.shards)]
        for i, fault in enumerate(self.faults):
            sel, where = fault.select, ("faults", i, "select")
            spec = KINDS[fault.kind]
            if not spec.sharded:
                kinds = ", ".join(k for k, s in KINDS.items() if s.sharded)
                raise FieldProblem(("faults", i, "kind"), f"{fault.kind} on a sharded target is "
                                   f"not there yet: {kinds}")  # fmt: skip
            if isinstance(sel, SelectDomain):
                self._sharded_domain(i, fault, sel)
            if sel in ("primary", "secondary", "arbiter") or isinstance(sel, SelectCount):
                raise FieldProblem(where, f"{describe_selection(sel)} of which replica set? A "
                                   "sharded target has several: say {shard: shard0, role: "
                                   "primary}, config-primary, or {mongos: N} for "
                                   "routers")  # fmt: skip
            if isinstance(sel, SelectRouter) and spec.sharded != "members and routers":
                raise FieldProblem(("faults", i, "kind"), f"{fault.kind} acts on a replica-"
                                   "set member; a router is none")  # fmt: skip
            if isinstance(sel, SelectRouter) and isinstance(fault, HostKillFault) \
                    and fault.wiped_on_restart:  # fmt: skip
                raise FieldProblem(("faults", i, "restart", "volume"), "a router keeps no data: "
                                   "volume: wipe (an initial sync) is a member's; say keep or "
                                   "leave it out")  # fmt: skip
            if not built:
                continue
            if isinstance(sel, SelectShard):
                if sel.shard != "any" and sel.shard not in names:
                    raise FieldProblem((*where, "shard"), f"no shard {sel.shard!r}: this target "
                                       f"has {', '.join(names)} (or any)")  # fmt: skip
                if sel.role == "secondary" and target.shard_topology == "rs1":
                    raise FieldProblem((*where, "role"), "select a secondary, but each shard is "
                                       "rs1 (one member)")  # fmt: skip
            if isinstance(sel, SelectRouter) and sel.mongos > target.mongos:
                raise FieldProblem((*where, "mongos"), f"{sel.mongos} routers, but the "
                                   f"target has {target.mongos}")  # fmt: skip
        if self.audit != "off":
            raise FieldProblem(("audit",), "the data audit of a sharded target is not there "
                               "yet: audit: off")  # fmt: skip
        for metric in self.slo:
            found = SET_METRIC.match(metric)
            if built and found and found.group(1) is not None and found.group(1) not in names:
                raise FieldProblem(("slo", metric), f"no shard {found.group(1)!r}: this target "
                                   f"has {', '.join(names)}", about_key=True)  # fmt: skip
        return self

    # Last of the checks (pydantic runs them in this order): a problem of the file itself is
    # reported at its own field, not as every matrix value's.
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
                except ValueError as exc:  # a ValidationError, or set_path's: no such place
                    why = nested_problem(exc, document) if isinstance(exc, ValidationError) else exc
                    raise FieldProblem(("matrix", "parameters", name),
                                       f"value {value!r} does not make a valid experiment: "
                                       f"{why}") from None  # fmt: skip
        return self
