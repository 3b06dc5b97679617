"""What an experiment will do, to which member and when, worked out from the file alone.

No side effects: nothing is started, nothing connects. Members named by role ("the primary") are
resolved by the runner at injection time, so the plan says "at that moment".
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Protocol, cast

from rsdrill import registry
from rsdrill.domains import planned, summary
from rsdrill.experiment.catalog import way_of
from rsdrill.experiment.probes import (
    AvailabilityProbe,
    DurabilityProbe,
    FailoverProbe,
    LagProbe,
    LoadProbe,
    Probes,
    RecoveryProbe,
    TransactionsProbe,
)
from rsdrill.experiment.schema import (
    SLO_PATTERN,
    Experiment,
    Fault,
    SelectCount,
    SelectDomain,
    Target,
    describe_selection,
)
from rsdrill.experiment.schema import format_duration as _secs
from rsdrill.layout import member_count
from rsdrill.redact import redact_uri

# MongoDB's own defaults, which the sandbox uses unless the target overrides them.
_DEFAULT_ELECTION_TIMEOUT_S = 10.0
ONE_WAY_MARK = "ONE-WAY"
"""Marks a fault that cannot be undone in the plan's timeline (`rsdrill plan` shows it red)."""
_DEFAULT_HEARTBEAT_INTERVAL_S = 2.0
_DEFAULT_HEARTBEAT_TIMEOUT_S = 10.0
_DEFAULT_OPLOG_MB = 192

_TOPOLOGY_SHAPE = {
    "rs1": "one data-bearing member",
    "rs3": "three data-bearing members",
    "rs5": "five data-bearing members",
    "psa": "primary, secondary and arbiter",
    "standalone": "one server without a replica set",
}


@dataclass(frozen=True)
class PlannedStep:
    """One thing the run will do: at `at_s` seconds after the probes start (until `until_s`
    for an observation window). `action` is "inject", "revert", "step" or "observe"."""

    at_s: float
    action: str
    kind: str
    selection: str
    description: str
    until_s: float | None = None


def plan_experiment(exp: Experiment) -> list[PlannedStep]:
    """The run's timeline: steady state, each fault's injection and revert, then recovery."""
    first_fault_s = min(f.at for f in exp.faults)
    steps = [
        PlannedStep(
            0.0,
            "observe",
            "steady-state",
            "",
            f"steady state: probes record a baseline "
            f"(at least {_secs(exp.observe.steady_state)} before the first fault)",
            until_s=first_fault_s,
        )
    ]
    fault_steps: list[PlannedStep] = []
    for fault in exp.faults:
        fault_steps.extend(_fault_steps(fault, exp.target.platform))
    for step in exp.steps:
        marks = "" if step.marks == "none" else f" (marks the {step.marks})"
        fault_steps.append(PlannedStep(step.at, "step", step.name, "", f"run `{step.run}`{marks}"))
    steps.extend(sorted(fault_steps, key=lambda s: s.at_s))
    steps.append(_recovery_step(exp, last_s=max(s.at_s for s in fault_steps)))
    return steps


def _fault_steps(fault: Fault, platform: str) -> list[PlannedStep]:
    selection = describe_selection(fault.select)
    description = f"{selection} ({fault.plan_words(platform)})"
    way = way_of(platform, fault)
    if way is not None and way.support == "one-way":
        description += f" {ONE_WAY_MARK}: {way.how}, cannot be undone"
    elif way is not None and way.support == "approximate":
        description += f"; approximated: {way.how}"
    inject = PlannedStep(fault.at, "inject", fault.kind, selection, description)
    revert_after = fault.revert_after
    if revert_after is None:
        return [inject]
    many = isinstance(fault.select, SelectDomain) or (
        isinstance(fault.select, SelectCount) and fault.select.count > 1
    )
    them = "them" if many else "it"
    revert = PlannedStep(
        fault.at + revert_after,
        "revert",
        fault.kind,
        selection,
        fault.plan_revert_words(platform, them),
    )
    return [inject, revert]


def _recovery_step(exp: Experiment, last_s: float) -> PlannedStep:
    window = exp.observe.after_revert
    if exp.observe.until_recovered:
        what = (
            f"until every member is healthy (at least {_secs(min(2.0, window))}, "
            f"at most {_secs(window)})"
        )
    else:
        what = f"for {_secs(window)}"
    return PlannedStep(last_s, "observe", "recovery", "", what, until_s=last_s + window)


# -- the whole plan as text ----------------------------------------------------------------------


def render_plan(exp: Experiment) -> str:
    """The plan as readable text: target, probes, timeline and SLOs."""
    lines = [f"experiment {exp.name}"]
    if exp.description:
        lines.append(f"  {exp.description.strip()}")
    lines += ["", "target", *_indent(describe_target(exp.target))]
    lines += ["", "probes", *_indent(describe_probes(exp.probes, exp.target))]
    if exp.random_faults is not None:
        lines += ["", f"random schedule: seed {exp.random_faults.seed} "
                  f"(replay: rsdrill run FILE --seed {exp.random_faults.seed})"]  # fmt: skip
    lines += ["", "timeline (seconds from the start of the probes)"]
    lines += _indent(_timeline(plan_experiment(exp)))
    lines += _indent(_warnings(exp))
    lines += ["", "slo"]
    slo = [f"{metric} {_condition(condition)}" for metric, condition in exp.slo.items()]
    lines += _indent(slo or ["none: the run reports its metrics and passes"])
    if exp.matrix is not None:
        lines += ["", "matrix", *_indent(_describe_matrix(exp))]
    details = _platform_details(exp)
    if details:
        lines += ["", f"{exp.target.platform} resources", *_indent(details)]
    return "\n".join(lines) + "\n"


def plan_data(exp: Experiment) -> dict[str, Any]:
    """The plan as data (`rsdrill plan --json`): what `render_plan` shows, the timeline as one
    object per step, the probes by name; target and platform resources as lines of text."""
    return {
        "experiment": exp.name,
        "description": exp.description,
        "platform": exp.target.platform,
        "topology": exp.target.topology,
        "target": describe_target(exp.target),
        "probes": probe_descriptions(exp.probes),
        "seed": exp.random_faults.seed if exp.random_faults is not None else None,
        "timeline": [
            {**asdict(step), "one_way": ONE_WAY_MARK in step.description}
            for step in plan_experiment(exp)
        ],
        "notes": _warnings(exp),
        "slo": {metric: _condition(condition) for metric, condition in exp.slo.items()},
        "matrix": _describe_matrix(exp) if exp.matrix is not None else None,
        "resources": _platform_details(exp),
    }


class PlatformPlan(Protocol):
    """What the plan asks of a platform (the whole interface is `platforms/base.py: Platform`)."""

    def plan_details(self, exp: Experiment) -> list[str]:
        """Lines the plan shows about what the platform will create (may be empty)."""
        ...


def _platform_details(exp: Experiment) -> list[str]:
    """What a platform adds to the plan (e.g. the chaos resources it would create)."""
    return cast("PlatformPlan", registry.platform(exp.target.platform)).plan_details(exp)


def _describe_matrix(exp: Experiment) -> list[str]:
    assert exp.matrix is not None
    runs = len(exp.variants())
    lines = [f"{runs} runs, one per combination (the timeline above is the first):"]
    lines += [f"{name}: {', '.join(map(str, values))}"
              for name, values in exp.matrix.parameters.items()]  # fmt: skip
    if exp.matrix.table:
        t = exp.matrix.table
        across = f", {t.columns} across" if t.columns else ""
        lines.append(f"table of {', '.join(t.shown)}: {t.rows} down{across}")
    return lines


def _condition(condition: str) -> str:
    match = re.match(SLO_PATTERN, condition)
    return f"{match.group(1)} {match.group(2)}" if match else condition


def _indent(lines: list[str]) -> list[str]:
    return [f"  {line}" for line in lines]


def _timeline(steps: list[PlannedStep]) -> list[str]:
    rows = []
    for step in steps:
        when = f"t+{step.at_s:.1f}s"
        if step.until_s is not None:
            when += f"..{step.until_s:.1f}s"
        kind = "" if step.action == "observe" else step.kind
        rows.append((when, step.action, kind, step.description))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(row[:3], widths, strict=True))
        + "  "
        + row[3]
        for row in rows
    ]


def _warnings(exp: Experiment) -> list[str]:
    """The plan's notes: a fault before the steady state, the balancer held for the run, the
    runbook of a lost majority, timings under which a new primary cannot stay."""
    notes = []
    first = min(f.at for f in exp.faults)
    if first < exp.observe.steady_state:
        notes.append(
            f"note: the first fault (t+{first:.1f}s) comes before "
            f"{_secs(exp.observe.steady_state)} of steady state"
        )
    if exp.guards.stop_balancer:
        notes.append(_balancer_note(exp.target))
    if (liveness := _liveness_note(exp.target)) is not None:
        notes.append(liveness)
    if exp.recovery is not None:
        notes.append(
            f"recovery: {_secs(exp.recovery.force_reconfig.after)} after the faults leave "
            "fewer than a majority of the voting members up, the survivors reconfigured with "
            "force (they elect a primary); after the faults, each lost member added back "
            "without a vote, then its vote once SECONDARY"
        )
    return notes


def _liveness_note(target: Target) -> str | None:
    """An election timeout no longer than the heartbeat interval: a primary steps down when a
    majority has not been heard from within the election timeout, and a secondary waiting on a
    frozen or cut-off sync source is heard from by its heartbeats only."""
    election = target.election_timeout
    if election is None or target.topology in ("rs1", "standalone"):
        return None
    heartbeat = target.heartbeat_interval or _DEFAULT_HEARTBEAT_INTERVAL_S
    if heartbeat < election:
        return None
    return (
        f"note: the heartbeat interval ({_secs(heartbeat)}) is not shorter than the election "
        f"timeout ({_secs(election)}): while a secondary's sync source is frozen or cut off, a "
        "new primary hears from it too rarely and steps down again and again, as mongod's "
        "would; scale both (MongoDB's defaults: 2 s of 10 s)"
    )


def _balancer_note(target: Target) -> str:
    """What guards.stop_balancer will do (a sharded target's: the file is refused otherwise)."""
    if registry.member_source(target.platform) == "built" and not target.balancer:
        return ("balancer: off in this sandbox (balancer: false): guards.stop_balancer leaves "
                "it off")  # fmt: skip
    return ("balancer: stopped for the run (guards.stop_balancer): balancerStop on a router "
            "after the guards, before the probes and the first fault; balancerStart once the "
            "faults are reverted, only if it was on (after a crash: `rsdrill recover`); one "
            "already off is left off")  # fmt: skip


def describe_target(target: Target) -> list[str]:
    """Where the replica set is and how it is set up, one line per fact."""
    source = registry.member_source(target.platform)
    if source == "listed":
        lines = [f"{target.platform} processes, {target.topology} expected; "
                 f"uri {redact_uri(target.uri or '')}"]  # fmt: skip
        for m in target.members:
            lines.append(
                f"member {m.host}: started by `{m.start}`, data in {m.dbpath or '(not given)'}"
            )
        return lines
    if source == "discovered":
        # "a replica set on ec2": "a ec2 replica set" read wrong (and so would "an kubernetes")
        return [f"a replica set on {target.platform}, {target.topology} expected; "
                f"uri {redact_uri(target.uri or '')}"]  # fmt: skip
    if target.topology == "sharded":
        per_shard = member_count(target.shard_topology)
        count = 3 + target.shards * per_shard + target.mongos
        shape = (f"config servers (rs3), {target.shards} shard(s) of "
                 f"{target.shard_topology} ({_TOPOLOGY_SHAPE[target.shard_topology]}), "
                 f"{target.mongos} router(s), balancer "
                 f"{'on' if target.balancer else 'off'}")  # fmt: skip
    else:
        count = member_count(target.topology)
        shape = _TOPOLOGY_SHAPE[target.topology]
    ports = (
        f"ports {target.port_base}-{target.port_base + count - 1}"
        if target.port_base
        else "free ports found at run time"
    )
    lines = [
        f"{target.platform} {target.topology}: {shape}, engine {target.engine}, {ports}",
        "election timeout "
        + _setting(target.election_timeout, _DEFAULT_ELECTION_TIMEOUT_S)
        + ", heartbeat interval "
        + _setting(target.heartbeat_interval, _DEFAULT_HEARTBEAT_INTERVAL_S)
        + ", heartbeat timeout "
        + _setting(target.heartbeat_timeout, _DEFAULT_HEARTBEAT_TIMEOUT_S),
        f"oplog {target.oplog_size_mb or _DEFAULT_OPLOG_MB} MB"
        + (
            f", initial sync capped at {target.initial_sync_mb_per_s:g} MB/s"
            if target.initial_sync_mb_per_s
            else ""
        )
        + (f", {target.data_mb} MB of data preloaded" if target.data_mb else "")
        + (f", page cache {target.cache_mb} MB per member" if target.cache_mb else "")
        + (
            f", journal committed every {target.journal_commit_interval * 1000:g} ms"
            if target.journal_commit_interval is not None
            else ""
        ),
        "left running after the run" if target.keep else "torn down after the run",
    ]
    if target.zones:
        lines.append(summary(planned(target.zones, count)))
    if target.priorities:
        # Who takes the primary back once it can (MongoDB's priority takeover).
        each = (f"member {i}: {p:g}" for i, p in enumerate(target.priorities))
        lines.append("priorities: " + ", ".join(each))
    return lines


def _setting(value: float | None, default_s: float) -> str:
    if value is None:
        return f"{_secs(default_s)} (MongoDB's default)"
    return _secs(value)


def describe_probes(probes: Probes, target: Target | None = None) -> list[str]:
    """One line per probe: what it does and how often, or "off"."""
    described = probe_descriptions(probes)
    if target is not None and target.topology == "sharded":
        # Each compares one set's members: not on a sharded target yet.
        described["lag"] = "not on a sharded target yet"
        if probes.availability is not None and probes.availability.writes:
            described["availability"] += (f"; and writes to each shard's own chunk (shard0.."
                                           f"shard{target.shards - 1}) through the routers; "
                                           "no raw writes")  # fmt: skip
    width = max(map(len, described))
    return [f"{name.ljust(width)}  {text}" for name, text in described.items()]


def probe_descriptions(probes: Probes) -> dict[str, str]:
    """Each probe's name → what it does and how often, or "off"."""
    describers: dict[str, Callable[[Any], str]] = {
        "availability": _availability,
        "failover": _failover,
        "recovery": _recovery,
        "lag": _lag,
        "durability": _durability,
        "load": _load,
    }
    described = {
        name: describe(config) if (config := getattr(probes, name)) is not None else "off"
        for name, describe in describers.items()
    }
    if probes.ledger_shares_writes and probes.durability is not None:
        described["durability"] = (
            "the availability probe's acknowledged writes are the ledger (no writes of its "
            f"own); read back (majority) within {_secs(probes.durability.readback_timeout)}"
        )
    if probes.transactions is not None:  # opt-in: plans without it do not name it
        described["transactions"] = _transactions(probes.transactions)
    return described


def _transactions(p: TransactionsProbe) -> str:
    low, high = p.txn_len
    return (
        f"list-append transactions on {p.clients} clients, each every {_secs(p.interval)}: "
        f"{low}-{high} micro-ops over {p.keys} keys, snapshot reads, majority writes; "
        "checked for anomalies (G0, G1, G-single, G2)"
    )


def _availability(p: AvailabilityProbe) -> str:
    loops = [w for w, on in (("writes", p.writes), ("reads", p.reads)) if on]
    return (
        f"{' and '.join(loops) or 'nothing'} every {_secs(p.interval)}, timeout "
        f"{_secs(p.timeout)}, w:{p.write_concern}, retries {'on' if p.retries else 'off'}, "
        f"read preference {p.read_preference}"
        + (f" (tags {', '.join(map(_tag_set, p.read_tags))})" if p.read_tags else "")
    )


def _tag_set(tags: dict[str, str]) -> str:
    return "{" + ", ".join(f"{k}: {v}" for k, v in tags.items()) + "}"


def _failover(p: FailoverProbe) -> str:
    return (
        f"awaitable hello on each member (answered at least every {_secs(p.max_await)}, at once "
        f"on a change), timeout {_secs(p.timeout)}"
    )


def _recovery(p: RecoveryProbe) -> str:
    return f"replSetGetStatus on each member every {_secs(p.interval)}"


def _lag(p: LagProbe) -> str:
    return f"replication lag from the primary every {_secs(p.interval)}"


def _durability(p: DurabilityProbe) -> str:
    return (
        f"numbered writes every {_secs(p.interval)}, w:{p.write_concern}, retries "
        f"{'on' if p.retries else 'off'}; read back (majority) within {_secs(p.readback_timeout)}"
    )


def _load(p: LoadProbe) -> str:
    mix = {"a": "50/50 read/update", "b": "95/5 read/update", "c": "reads only"}[p.workload]
    return (
        f"workload {p.workload} ({mix}), {p.rate:g} ops/s on {p.threads} threads, "
        f"{p.records} records of {p.record_bytes} B, {p.distribution} keys, w:{p.write_concern}"
    )
