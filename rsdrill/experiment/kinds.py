"""One spec per fault kind: its meaning, its own fields, their cross-field check, when a fault
of it is reverted, whether it needs a `duration`, and how `rsdrill plan` words it. What a
platform really does for a kind (exactly, approximately, or one way only) is the platform's own:
its `ways` (`Platform.ways`, the `ways.py` of its package), read through the registry.

This is the single source of the fault kinds' names and own fields (`schema.py` builds one
model per kind from the specs without naming any kind, so a field of another kind is refused),
of what the rest of rsdrill needs to know of a kind (how `rsdrill plan` words it, whether the
guards count its member as down, which tools of this machine and which server privileges it
needs: no module outside this one and the platforms' injectors names a kind, a test holds them
to it), of `rsdrill faults`, of docs/faults.md and of the README's fault tables (tests fail when
they differ: their columns are the registered platforms'), and of the opt-ins: `way_of`
decides, per fault, which way a platform takes; a fault whose way is approximate loads only with
`approximate: true`, a one-way one only with `one_way: true`. A platform carries a kind out only
if it states a way for it and registers an injector for it (`Platform.ways`,
`Platform.injectors`), or if the kind is done the same on every platform (its spec's `way` and
`injector`); whether it accepts the kind's options is decided by its own load-time check. A test
keeps the built-in platforms' ways true to both.

Adding a kind: its fields model and check here, next to its `KindSpec`, then one injector and
its ways per platform that supports it (see docs/architecture.md).
"""

from __future__ import annotations

import errno as errno_names
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import AfterValidator, Field

from rsdrill import registry
from rsdrill.experiment.fields import Duration, FieldProblem, Strict
from rsdrill.experiment.fields import format_duration as _secs

if TYPE_CHECKING:
    from rsdrill.platforms.base import Platform

Support = Literal["exact", "approximate", "one-way"]
"""exact: the fault itself; approximate: something close to it (said in the cell); one-way: it
cannot be undone within the run (a terminated instance, a volume modification AWS allows once
per 6 hours, wiped data, a deleted Node)."""

OPT_IN: dict[Support, str] = {"approximate": "approximate", "one-way": "one_way"}
"""The fault field that allows a way of this support (exact ways need none)."""


@dataclass(frozen=True)
class When:
    """The fault options under which a way is taken: in the words the tables show, and as a
    test of a fault of the way's kind."""

    words: str
    applies: Callable[[Any], bool]


@dataclass(frozen=True)
class Way:
    """One way a platform carries a kind out (a platform's `ways`, or a kind's own `way`)."""

    how: str
    support: Support = "exact"
    engine: str | None = None
    """The fault's `engine` that takes this way (None: the platform has no engines)."""
    when: When | None = None
    """The fault options under which this way is taken; None: the engine's way when no other
    of its ways applies."""
    privileges: tuple[str, ...] = ()
    """What the identity rsdrill runs as must be allowed, to inject and to revert: Kubernetes
    RBAC as `verbs resource[/subresource][.group]` (comma-separated verbs; in the target's
    namespace unless it ends in ` cluster-wide`), AWS IAM actions, vSphere privileges. The
    Kubernetes preflight, `rsdrill schedule render`'s Role and the EC2 and vSphere plans read
    them from here."""

    def line(self, kind: str, platform: str) -> str:
        """This way as the table states it, for messages."""
        engine = f" (engine {self.engine})" if self.engine else ""
        return f"{kind} on {platform}{engine}: {self.how}{_MARKS[self.support]}"


def _wiped_on_restart(fault: Any) -> bool:
    """host-kill with `restart.volume: wipe`: the member comes back on an empty data volume."""
    return bool(fault.restart) and fault.restart.volume == "wipe"


class NoFields(Strict):
    """A kind with no fields of its own."""


FaultCheck = Callable[[Any], None]
"""A kind's check across a fault's fields: raises `FieldProblem` (located in the fault)."""
RevertRule = Callable[[Any], "float | None"]
"""Seconds from a fault's injection to its revert, or None when it is not reverted."""


def after_duration(fault: Any) -> float | None:
    """The usual revert rule: the fault is reverted after its `duration`."""
    duration: float | None = fault.duration
    return duration


def never_reverted(fault: Any) -> None:
    """Nothing to revert (a stepdown ends by itself; lost data only comes back by a restore)."""
    return None


FaultRule = bool | Callable[[Any], bool]
"""Whether something holds of a fault: for every fault of the kind, or as its fields say."""


def holds(rule: FaultRule, fault: Any) -> bool:
    """Whether `rule` holds of `fault`."""
    return rule(fault) if callable(rule) else rule


Words = Callable[[Any, str], str]
"""What `rsdrill plan` says a fault does when injected: (fault, platform) → words."""
RevertWords = Callable[[Any, str, str], str]
"""What `rsdrill plan` says its revert does: (fault, platform, "it" or "them") → words."""

LocalTool = Literal["nftables", "fuse"]
"""What the sandbox and local platforms need of this machine to inject a fault (`rsdrill check`
looks for it): the `nft` command, or FUSE for faultfs."""


def on_this_machine(platform: str) -> bool:
    """Whether the platform's faults are injected here, on member processes (sandbox, local)."""
    return platform in ("sandbox", "local")


def _lasting(what: Callable[[Any], str]) -> Words:
    """The words of a fault that holds for its `duration`: what it does, then for how long."""

    def words(fault: Any, platform: str) -> str:
        done = what(fault)
        return done if fault.duration is None else f"{done} for {_secs(fault.duration)}"

    return words


def _undo(what: str) -> RevertWords:
    """Revert words: `what`, on the member or members."""
    return lambda fault, platform, them: f"{what} on {them}"


@dataclass(frozen=True)
class KindSpec:
    kind: str
    meaning: str
    fields: type[Strict] = NoFields
    """The kind's own fault fields (a pydantic model; another kind may have a same-named one)."""
    fields_doc: str = ""
    needs_duration: bool = False
    """Lasts until reverted: without a `duration` it would outlive the run."""
    check: FaultCheck | None = None
    revert_after: RevertRule = after_duration
    injector: str | None = None
    """`module:function` of the one injector every platform uses (none: each platform's own)."""
    way: Way | None = None
    """The one way every platform carries it out by, with `injector` (None: each platform's
    own `ways`)."""
    plan: Words = field(kw_only=True)
    """What `rsdrill plan` says a fault of it does when injected (after the member)."""
    plan_revert: RevertWords | None = field(default=None, kw_only=True)
    """What `rsdrill plan` says its revert does (None: never reverted, `never_reverted`)."""
    takes_member_down: FaultRule = field(default=True, kw_only=True)
    """While in force, its member is out of the set's majority: the quorum guard counts it, and
    the oplog-window guard bounds how long (False: slowed or troubled, not gone)."""
    rebuilds_data: FaultRule = field(default=False, kw_only=True)
    """Its member comes back on rebuilt data (a full initial sync, a restore), not by catching
    up from the oplog: the oplog-window guard does not bound it."""
    local_tools: tuple[LocalTool, ...] | Callable[[Any], tuple[LocalTool, ...]] = field(
        default=(), kw_only=True
    )
    """What injecting it on the sandbox and local platforms needs of this machine."""
    server_privileges: tuple[tuple[str, str], ...] = field(default=(), kw_only=True)
    """(action on the cluster resource, the built-in role that grants it) its own command
    needs of a server with access control (`rsdrill check` asks for them)."""
    needs_test_commands: bool = field(default=False, kw_only=True)
    """Its command exists only on a mongod started with enableTestCommands (`rsdrill check`
    asks every member)."""
    disaster: bool = field(default=False, kw_only=True)
    """A disaster only a restore brings the set back from: loading needs a step with `marks:
    restore`, the run records its time for the disaster-recovery metrics, a random schedule
    never draws it."""
    replica_set_only: str = field(default="", kw_only=True)
    """Why a standalone server cannot take it (empty: it can); loading refuses it there."""
    drawn: Mapping[str, Any] = field(default_factory=dict, kw_only=True)
    """What a fault of it drawn by its name alone (`faults: {random: {kinds: [name]}}`) is
    given beyond its defaults, to do something."""
    for_good: Mapping[str, Any] = field(default_factory=dict, kw_only=True)
    """The fields that keep a fault of it in force to the end of the run: a replay gives them
    to a fault the original run never reverted (empty: a `duration` of None does)."""
    unavailable: str = field(default="", kw_only=True)
    """What loading says, after the kind's name, on a platform without an injector for it
    (`{platform}` is replaced; empty: the generic `is not available on P (it has: ...)`)."""

    def tools(self, fault: Any) -> tuple[LocalTool, ...]:
        """What injecting `fault` here (sandbox, local) needs of this machine."""
        tools = self.local_tools
        return tools(fault) if callable(tools) else tools


# -- host-kill -----------------------------------------------------------------------------------


HA_DETECT_S = 15.0
"""vSphere HA's host failure detection: a host that sends no heartbeat for 15 s and answers no
ping is declared failed, and its VMs are restarted on other hosts (VMware's documentation: see
docs/platforms/vsphere.md)."""
HA_BOOT_S = 60.0
"""The guest's boot, from power-on to mongod's start: an assumption (BIOS/EFI, the OS, its
services), not a VMware figure."""


class Restart(Strict):
    """host-kill: how the member comes back (as an HA restart would bring a host back)."""

    model: Literal["delay", "ha"] = Field(
        "delay",
        description="delay: restart after `after` (or the fault's duration); ha: as vSphere HA "
        "restarts a failed host's VM: the failure is detected after `detect`, the host boots "
        "for `boot`, then the member starts; each phase is measured (faults[i].detail.ha)",
    )
    after: Duration | None = Field(
        None, description="restart this long after the kill (default: the fault's duration)"
    )
    volume: Literal["keep", "wipe"] = Field(
        "keep", description="keep: restart on the data (catch up); wipe: full initial sync"
    )
    detect: Duration = Field(
        HA_DETECT_S,
        description="model ha: the time HA takes to declare the host failed and restart it "
        "(default 15 s, vSphere HA's documented detection)",
    )
    boot: Duration = Field(
        HA_BOOT_S,
        description="model ha, sandbox and local: the host's boot before mongod starts "
        "(default 60 s, an assumption); on vSphere the VM boots by itself",
    )


class HostKillFields(Strict):
    restart: Restart | Literal[False] = Field(
        default_factory=Restart, description="host-kill only; false: never restart"
    )
    power_loss: bool = Field(
        False, description="host-kill: writes not yet fsynced are lost, as in a power-off"
    )


_HA_ONLY = ("detect", "boot")


def _host_kill_check(fault: Any) -> None:
    restart = fault.restart
    if not restart:
        return
    if restart.model == "ha":
        if restart.after is not None:
            raise FieldProblem(("restart", "after"), "model ha restarts the host `detect` after "
                               "the failure (then it boots for `boot`): drop `after`")  # fmt: skip
        if fault.duration is not None:
            raise FieldProblem(("duration",), "model ha restarts the host `detect` after the "
                               "failure: drop `duration`")  # fmt: skip
        return
    for name in _HA_ONLY:
        if name in restart.model_fields_set:
            raise FieldProblem(("restart", name), f"{name} applies to restart model ha: add "
                               "`model: ha`, or drop it")  # fmt: skip
    if restart.after is None and fault.duration is None:
        raise FieldProblem(
            ("duration",), "host-kill needs `duration` or `restart.after` (or restart: false)"
        )


def ha_restart(fault: Any) -> Restart | None:
    """The fault's restart if it follows vSphere HA's model (a host-kill with `model: ha`)."""
    restart = fault.restart if fault.kind == "host-kill" else None
    return restart if restart and restart.model == "ha" else None


def ha_detail(restart: Restart, *, boot_waited: bool) -> dict[str, Any]:
    """What an HA restart's injector reports (`faults[i].detail.ha`): the model it followed,
    the boot None where the host boots by itself (a VM); the run's analysis adds the measured
    phases."""
    return {"model": {"detect_s": restart.detect,
                      "boot_s": restart.boot if boot_waited else None}}  # fmt: skip


def _host_kill_revert(fault: Any) -> float | None:
    """The host comes back after `restart.after` or `duration`; with the HA model once HA has
    detected the failure (its boot and the member's start follow)."""
    if fault.restart is False:
        return None
    if fault.restart.model == "ha":
        detect: float = fault.restart.detect
        return detect
    after: float | None = fault.restart.after
    return after if after is not None else fault.duration


def _host_kill_words(fault: Any, platform: str) -> str:
    if on_this_machine(platform):
        how = "SIGKILL, unsynced writes lost" if fault.power_loss else "SIGKILL"
    else:
        how = f"{platform}: lose the host"
    if fault.scope != "member":
        how += f" (its whole {fault.scope})"
    return how if fault.restart else f"{how}; never restarted"


def _host_kill_revert_words(fault: Any, platform: str, them: str) -> str:
    if _wiped_on_restart(fault):
        data = "an empty data directory (full initial sync)"
    else:
        data = f"{'their' if them == 'them' else 'its'} kept data directory"
    restart = fault.restart
    if restart and restart.model == "ha":
        detected = f"HA restarts {them} (detected after {_secs(restart.detect)}): "
        if on_this_machine(platform):
            return f"{detected}boot {_secs(restart.boot)}, then the member starts on {data}"
        return f"{detected}power on; the VM boots by itself, mongod starts on {data}"
    return f"restart {them} on {data}"


# -- host-freeze ---------------------------------------------------------------------------------


def _host_freeze_words(fault: Any, platform: str) -> str:
    how = "SIGSTOP" if on_this_machine(platform) else f"{platform}: freeze"
    return f"{how} for {_secs(fault.duration or 0.0)}"


def _host_freeze_revert_words(fault: Any, platform: str, them: str) -> str:
    return f"resume {them}" + (" (SIGCONT)" if on_this_machine(platform) else "")


# -- stepdown ------------------------------------------------------------------------------------


class StepdownFields(Strict):
    secondary_catch_up: Duration = Field(10.0, description="stepdown: secondaryCatchUpPeriodSecs")
    force: bool = Field(False, description="stepdown: step down even without a caught-up heir")


def _stepdown_check(fault: Any) -> None:
    if fault.duration is not None and fault.duration < fault.secondary_catch_up:
        raise FieldProblem(
            ("duration",),
            "stepdown: `duration` (the stepdown period) must be at least `secondary_catch_up`",
        )


_DEFAULT_STEPDOWN_S = 60.0
"""replSetStepDown's period when the fault gives no `duration` (MongoDB's default)."""


def _stepdown_words(fault: Any, platform: str) -> str:
    period = fault.duration if fault.duration is not None else _DEFAULT_STEPDOWN_S
    force = ", force" if fault.force else ""
    return (
        f"replSetStepDown: not electable for {_secs(period)}, "
        f"secondaries get {_secs(fault.secondary_catch_up)} to catch up{force}"
    )


# -- disk-fault, iops-throttle -------------------------------------------------------------------

DiskOperation = Literal["read", "write", "fsync", "open", "any"]


def _errno_name(value: str) -> str:
    if value != "none" and not isinstance(getattr(errno_names, value, None), int):
        raise ValueError(f"{value!r} is not an errno name like EIO, ENOSPC, EROFS (or none)")
    return value


def _latency() -> Any:
    return Field(None, description="disk-fault, iops-throttle: added to every matching operation")


class DiskFaultFields(Strict):
    errno: Annotated[str, AfterValidator(_errno_name)] = Field(
        "EIO", description="disk-fault: the error returned (an errno name), or none"
    )
    operations: tuple[DiskOperation, ...] = Field(
        ("write", "fsync"), min_length=1, description="disk-fault: which operations fail"
    )
    probability: float = Field(
        1.0, gt=0, le=1, description="disk-fault: the share of matching operations that fail"
    )
    path: str | None = Field(
        None,
        description="disk-fault: only files matching this glob, relative to the data "
        "directory (e.g. journal/*)",
    )
    latency: Duration | None = _latency()
    replica: Literal["a", "b"] | None = Field(
        None,
        description="disk-fault, sandbox with `target.sandbox.mirror`: fail only this copy of "
        "the member's data (vSAN FTT=1's two copies); the other serves, and the failed one is "
        "resynced from it on revert",
    )


def _disk_fault_check(fault: Any) -> None:
    if fault.errno == "none" and fault.latency is None:
        raise FieldProblem(("errno",), "errno none and no latency: the fault does nothing")


def _disk_fault_words(fault: Any) -> str:
    parts = []
    if fault.errno != "none":
        share = "" if fault.probability == 1 else f"{fault.probability:.0%} of "
        parts.append(f"{fault.errno} on {share}{'/'.join(fault.operations)}")
    if fault.latency:
        parts.append(f"+{_secs(fault.latency)} per {'/'.join(fault.operations)}")
    where = f" of {fault.path}" if fault.path else ""
    copy = f" on replica {fault.replica} of its mirrored data" if fault.replica else ""
    return f"disk fault{copy}: {', '.join(parts)}{where}"


def _disk_fault_revert_words(fault: Any, platform: str, them: str) -> str:
    resync = f", resync replica {fault.replica} from the other" if fault.replica else ""
    return f"clear the disk fault{resync} on {them}"


def _disk_fault_takes_member_down(fault: Any) -> bool:
    # A member fails on a write or an fsync that fails; slow or failing reads leave it up. One
    # copy of mirrored data failing does not reach the member: the other copy serves.
    failing = {"write", "fsync", "any"} & set(fault.operations)
    return fault.errno != "none" and bool(failing) and fault.replica is None


class IopsThrottleFields(Strict):
    latency: Duration | None = _latency()
    iops: int | None = Field(None, gt=0, description="iops-throttle: reads and writes together")
    read_iops: int | None = Field(None, gt=0)
    write_iops: int | None = Field(None, gt=0)
    throughput_mb_s: float | None = Field(None, gt=0, description="iops-throttle: MiB/s")
    read_mb_s: float | None = Field(None, gt=0)
    write_mb_s: float | None = Field(None, gt=0)


def _iops_throttle_check(fault: Any) -> None:
    if not fault.model_fields_set & set(IopsThrottleFields.model_fields):
        raise FieldProblem(
            ("kind",),
            "iops-throttle needs a limit: iops, read_iops, write_iops, "
            "throughput_mb_s, read_mb_s, write_mb_s or latency",
        )


def _iops_throttle_words(fault: Any) -> str:
    limits = [
        f"{label} {value:g}{unit}"
        for label, value, unit in (
            ("iops", fault.iops, ""),
            ("read iops", fault.read_iops, ""),
            ("write iops", fault.write_iops, ""),
            ("throughput", fault.throughput_mb_s, " MiB/s"),
            ("reads", fault.read_mb_s, " MiB/s"),
            ("writes", fault.write_mb_s, " MiB/s"),
        )
        if value is not None
    ]
    if fault.latency:
        limits.append(f"+{_secs(fault.latency)} per operation")
    return f"throttle the disk: {', '.join(limits)}"


# -- network-partition, network-degrade ----------------------------------------------------------

_PEERS = {"members": "the other members", "clients": "clients", "all": "everyone"}
_ARROW = {"both": "both ways", "inbound": "inbound only", "outbound": "outbound only"}


class NetworkPartitionFields(Strict):
    isolate_from: Literal["members", "clients", "all"] = Field(
        "members", description="network-partition: who loses contact with the member"
    )
    direction: Literal["both", "inbound", "outbound"] = Field(
        "both",
        description="network-partition: inbound: others cannot reach the member; "
        "outbound: it cannot reach them",
    )
    shape: Literal["one", "halves", "bridge", "ring"] = Field(
        "one",
        description="network-partition, as Jepsen names them: one: the selected member alone; "
        "halves: it and the fewest others on the minority side; bridge: two halves that only "
        "the selected member joins; ring: each member reaches only its neighbours",
    )
    flapping: Duration | None = Field(
        None,
        gt=0,
        description="network-partition: cut and healed in turn at this interval for `duration`",
    )


def _network_partition_check(fault: Any) -> None:
    flapping, duration = fault.flapping, fault.duration
    if flapping is not None and duration is not None and flapping * 2 > duration:
        raise FieldProblem(("flapping",), "flapping: the interval must fit twice into `duration`")


def _network_partition_words(fault: Any) -> str:
    flap = f", cut and healed every {_secs(fault.flapping)}" if fault.flapping else ""
    if fault.shape != "one":
        return f"partition shape {fault.shape} around it (member links, both ways){flap}"
    return f"cut it off from {_PEERS[fault.isolate_from]} ({_ARROW[fault.direction]}){flap}"


class NetworkDegradeFields(Strict):
    latency: Duration | None = Field(
        None, description="network-degrade: added to what crosses each degraded direction"
    )
    jitter: Duration | None = Field(
        None, description="network-degrade: latency varies uniformly by up to this much"
    )
    loss: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="network-degrade: the share of segments lost (TCP resends them: a stall)",
    )
    bandwidth_mbit_s: float | None = Field(
        None, gt=0, description="network-degrade: each degraded direction's rate, Mbit/s"
    )
    duplicate: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="network-degrade (kubernetes): the share of packets sent twice",
    )
    corrupt: float | None = Field(
        None, gt=0, lt=1, description="network-degrade (kubernetes): the share of packets corrupted"
    )
    reorder: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="network-degrade (kubernetes, chaos-mesh): the share of packets sent at once, "
        "ahead of those `latency` holds back",
    )
    between: Literal["members", "clients", "all"] = Field(
        "all", description="network-degrade: which of the member's links are degraded"
    )
    direction: Literal["both", "inbound", "outbound"] = Field(
        "both", description="network-degrade: which of its traffic is degraded"
    )


def _network_degrade_check(fault: Any) -> None:
    given = fault.model_fields_set
    shapes = ("latency", "loss", "bandwidth_mbit_s", "duplicate", "corrupt")
    if all(getattr(fault, name) is None for name in shapes):
        raise FieldProblem(("kind",), "network-degrade needs latency, loss, bandwidth_mbit_s, "
                           "duplicate or corrupt")  # fmt: skip
    if "jitter" in given and "latency" not in given:
        raise FieldProblem(("jitter",), "jitter varies the latency: give `latency` too")
    # netem reorders by sending some packets at once while the rest wait `latency`.
    if "reorder" in given and not fault.latency:
        raise FieldProblem(("reorder",), "reorder sends some packets ahead of those `latency` "
                           "delays: give a `latency` above 0")  # fmt: skip


def _network_degrade_words(fault: Any) -> str:
    shaped = [
        text
        for text, given in (
            (f"+{_secs(fault.latency or 0)}", fault.latency),
            (f"± {_secs(fault.jitter or 0)}", fault.jitter),
            (f"{(fault.loss or 0):.0%} loss", fault.loss),
            (f"{fault.bandwidth_mbit_s or 0:g} Mbit/s", fault.bandwidth_mbit_s),
            (f"{(fault.duplicate or 0):.0%} duplicated", fault.duplicate),
            (f"{(fault.corrupt or 0):.0%} corrupted", fault.corrupt),
            (f"{(fault.reorder or 0):.0%} reordered", fault.reorder),
        )
        if given
    ]
    return (
        f"degrade its links to {_PEERS[fault.between]} ({_ARROW[fault.direction]}): "
        + ", ".join(shaped)
    )


# -- mongodb-fail-command ------------------------------------------------------------------------


class FailCommandFields(Strict):
    commands: tuple[Annotated[str, Field(min_length=1)], ...] = Field(
        ("insert",), min_length=1, description="mongodb-fail-command: the commands that fail"
    )
    error_code: int | None = Field(
        None, description="mongodb-fail-command: the error code they answer with (e.g. 91)"
    )
    error_labels: tuple[str, ...] | None = Field(
        None, description="mongodb-fail-command: the error labels (default: the server's)"
    )
    close_connection: bool = Field(
        False, description="mongodb-fail-command: drop the connection instead of answering"
    )
    block_time: Duration | None = Field(
        None, description="mongodb-fail-command: hold each command this long (blockConnection)"
    )
    times: int | None = Field(
        None, ge=1, description="mongodb-fail-command: fail this many commands, then stop"
    )
    app_name: str | None = Field(
        None, description="mongodb-fail-command: only connections of this appName"
    )


def _fail_command_check(fault: Any) -> None:
    if fault.duration is None and fault.times is None:
        raise FieldProblem(("duration",), "mongodb-fail-command needs `duration` or "
                           "`times` (else it outlives the run)")  # fmt: skip
    if fault.error_code is None and not fault.close_connection and fault.block_time is None:
        raise FieldProblem(("error_code",), "mongodb-fail-command needs error_code, "
                           "close_connection or block_time: it does nothing")  # fmt: skip


def _fail_command_words(fault: Any) -> str:
    how = [f"error {fault.error_code}"] if fault.error_code is not None else []
    how += ["drop the connection"] if fault.close_connection else []
    how += [f"hold {_secs(fault.block_time)}"] if fault.block_time is not None else []
    times = f", {fault.times} times" if fault.times is not None else ""
    return f"failCommand: {'/'.join(fault.commands)} → {', '.join(how)}{times}"


# -- clock-skew, cpu-starve, memory-pressure, disk-fill ------------------------------------------


class ClockSkewFields(Strict):
    clock_offset: float = Field(
        60.0, description="clock-skew: seconds the member's clock is ahead (negative: behind)"
    )
    clock_drift: float = Field(
        0.0, ge=-0.5, le=0.5, description="clock-skew: seconds it gains per second (drift)"
    )


class CpuStarveFields(Strict):
    cpu_share: float = Field(
        0.05, gt=0, le=1, description="cpu-starve: the share of one CPU the member keeps"
    )


class MemoryPressureFields(Strict):
    memory_limit_mb: float = Field(
        1.0, gt=0, description="memory-pressure: how much more the member may allocate"
    )


class DiskFillFields(Strict):
    fill_percent: float = Field(
        100.0, gt=0, le=100, description="disk-fill: how full the member's data disk gets"
    )


def _clock_skew_words(fault: Any) -> str:
    side = "ahead" if fault.clock_offset >= 0 else "behind"
    drift = f", drifting {fault.clock_drift:+g} s/s" if fault.clock_drift else ""
    return f"set its clock {_secs(abs(fault.clock_offset))} {side}{drift}"


if TYPE_CHECKING:

    class AnyKindFields(
        HostKillFields,
        StepdownFields,
        DiskFaultFields,
        IopsThrottleFields,
        NetworkPartitionFields,
        NetworkDegradeFields,
        FailCommandFields,
        ClockSkewFields,
        CpuStarveFields,
        MemoryPressureFields,
        DiskFillFields,
    ):
        """What type checkers see of a fault: every kind's fields (a kind's model reads
        another kind's field as its default)."""

else:
    AnyKindFields = Strict


KINDS: dict[str, KindSpec] = {
    spec.kind: spec
    for spec in (
        KindSpec(
            "host-kill",
            "the member's host is lost (SIGKILL, pod/instance/VM power-off); restarted after "
            "`restart.after` or `duration`, or as vSphere HA would (`restart.model: ha`)",
            fields=HostKillFields,
            fields_doc="`restart: {after, volume: keep\\|wipe}` or `false`; `restart: {model: "
            "ha, detect, boot}`: HA's detection, the host's boot, the member's start, each "
            "measured; `power_loss: true` "
            "drops writes not yet fsynced; `scope: node\\|host` (Kubernetes node, ESXi host)",
            check=_host_kill_check,
            revert_after=_host_kill_revert,
            plan=_host_kill_words,
            plan_revert=_host_kill_revert_words,
            rebuilds_data=_wiped_on_restart,
            for_good={"restart": False},
            # Its power loss goes through faultfs.
            local_tools=lambda fault: ("fuse",) if fault.power_loss else (),
        ),
        KindSpec(
            "host-freeze",
            "the host freezes (SIGSTOP, pod failure, VM suspend) for `duration`",
            needs_duration=True,
            plan=_host_freeze_words,
            plan_revert=_host_freeze_revert_words,
        ),
        KindSpec(
            "stepdown",
            "`replSetStepDown` on the primary (any platform)",
            fields=StepdownFields,
            fields_doc="`duration` (the stepdown period), `secondary_catch_up`, `force`",
            check=_stepdown_check,
            revert_after=never_reverted,
            injector="rsdrill.platforms.stepdown:stepdown_injector",
            way=Way("replSetStepDown"),
            plan=_stepdown_words,
            takes_member_down=False,
            server_privileges=(("replSetStateChange", "clusterManager"),),
            drawn={"secondary_catch_up": 1.0},
            replica_set_only="a standalone server has no primary to step down",
        ),
        KindSpec(
            "mongodb-fail-command",
            "MongoDB's `failCommand` fail point on the member for `duration` (or `times` "
            "commands), then mode off (any platform; a real mongod needs enableTestCommands)",
            fields=FailCommandFields,
            check=_fail_command_check,
            injector="rsdrill.platforms.fail_command:fail_command_injector",
            way=Way("configureFailPoint failCommand, then mode off"),
            plan=_lasting(_fail_command_words),
            plan_revert=_undo("set the fail point off"),
            takes_member_down=False,
            server_privileges=(("configureFailPoint", "hostManager"),),
            needs_test_commands=True,
            drawn={"commands": ["insert"], "error_code": 91},
            fields_doc="`commands` (names), `error_code`, `error_labels`, `close_connection`, "
            "`block_time` (blockConnection), `times`, `app_name`",
        ),
        KindSpec(
            "clock-skew",
            "the member's wall clock is `clock_offset` seconds off (and drifts `clock_drift` "
            "s/s) for `duration`: oplog and hello times, $clusterTime",
            fields=ClockSkewFields,
            fields_doc="`clock_offset` (seconds, may be negative), `clock_drift` (s per s)",
            needs_duration=True,
            plan=_lasting(_clock_skew_words),
            plan_revert=_undo("set the clock right"),
            takes_member_down=False,
        ),
        KindSpec(
            "cpu-starve",
            "the member gets `cpu_share` of one CPU for `duration` (a noisy neighbour)",
            fields=CpuStarveFields,
            fields_doc="`cpu_share` (of one CPU, default 0.05)",
            needs_duration=True,
            plan=_lasting(lambda fault: f"starve its CPU to {fault.cpu_share:.0%} of one CPU"),
            plan_revert=_undo("end the CPU starvation"),
            takes_member_down=False,
        ),
        KindSpec(
            "memory-pressure",
            "the member may allocate only `memory_limit_mb` more for `duration`: beyond it "
            "the OOM killer takes it (a host out of memory); restarted on revert",
            fields=MemoryPressureFields,
            fields_doc="`memory_limit_mb` (default 1: the OOM killer at once)",
            needs_duration=True,
            plan=_lasting(lambda fault: f"let it allocate only {fault.memory_limit_mb:g} MB more"),
            plan_revert=_undo("lift the memory limit"),
        ),
        KindSpec(
            "disk-fill",
            "the member's data disk filled to `fill_percent` for `duration`, then freed (full: "
            "it dies of ENOSPC as mongod does, and is restarted)",
            fields=DiskFillFields,
            fields_doc="`fill_percent` (default 100: ENOSPC)",
            needs_duration=True,
            plan=_lasting(lambda fault: f"fill its data disk to {fault.fill_percent:g}%"),
            plan_revert=_undo("free the disk"),
            # Full: ENOSPC ends the member.
            takes_member_down=lambda fault: fault.fill_percent >= 100,
        ),
        KindSpec(
            "disk-fault",
            "an errno and/or latency on the member's data files for `duration`",
            fields=DiskFaultFields,
            check=_disk_fault_check,
            fields_doc="`errno` (EIO, ENOSPC, ... or none), `operations` (read, write, fsync, "
            "open, any), `probability`, `path` (glob), `latency`; `replica` (a or b: one copy "
            "of a sandbox member's mirrored data)",
            needs_duration=True,
            plan=_lasting(_disk_fault_words),
            plan_revert=_disk_fault_revert_words,
            takes_member_down=_disk_fault_takes_member_down,
            local_tools=("fuse",),
        ),
        KindSpec(
            "iops-throttle",
            "I/O capped for `duration`",
            fields=IopsThrottleFields,
            check=_iops_throttle_check,
            fields_doc="`iops`, `read_iops`, `write_iops`, `throughput_mb_s`, `read_mb_s`, "
            "`write_mb_s`, `latency`",
            needs_duration=True,
            plan=_lasting(_iops_throttle_words),
            plan_revert=_undo("lift the throttle"),
            takes_member_down=False,
            local_tools=("fuse",),
            drawn={"write_iops": 50},
        ),
        KindSpec(
            "volume-detach",
            "the data volume vanishes for `duration` (every I/O fails), then comes back",
            needs_duration=True,
            plan=_lasting(lambda fault: "detach its data volume"),
            plan_revert=_undo("re-attach the volume"),
            local_tools=("fuse",),
        ),
        KindSpec(
            "network-partition",
            "the member is cut off for `duration`",
            fields=NetworkPartitionFields,
            check=_network_partition_check,
            fields_doc="`shape: one\\|halves\\|bridge\\|ring` (Jepsen's shapes, from the live "
            "roles), `flapping` (on and off at this interval), "
            "`isolate_from: members\\|clients\\|all`, `direction: "
            "both\\|inbound\\|outbound`",
            needs_duration=True,
            plan=_lasting(_network_partition_words),
            plan_revert=_undo("heal the partition"),
            # Cut from clients alone, it stays in the set's majority.
            takes_member_down=lambda fault: fault.isolate_from != "clients",
            local_tools=("nftables",),
        ),
        KindSpec(
            "network-degrade",
            "the member's links get slow, lossy or narrow for `duration`",
            fields=NetworkDegradeFields,
            check=_network_degrade_check,
            fields_doc="`latency` (added to each degraded direction), `jitter`, `loss` (a share), "
            "`bandwidth_mbit_s`, `duplicate`, `corrupt`, `reorder` (shares; Kubernetes; "
            "`reorder` needs `latency`), `between: members\\|clients\\|all`, "
            "`direction: both\\|inbound\\|outbound`",
            needs_duration=True,
            plan=_lasting(_network_degrade_words),
            plan_revert=_undo("restore the links"),
            takes_member_down=False,
            local_tools=("nftables",),
        ),
        KindSpec(
            "data-loss",
            "the host and its data are gone (sandbox, local); only a restore step brings them back",
            fields_doc='see "Disaster-recovery drills"',
            revert_after=never_reverted,
            plan=lambda fault, platform: (
                "SIGKILL, data directory emptied, no restart: the restore step brings it back"
            ),
            # A restore brings its data back, not the oplog.
            rebuilds_data=True,
            disaster=True,
            unavailable="(a wiped data directory) is for sandbox and local targets; on "
            "{platform}, destroy the volumes with a step of your own",
        ),
    )
}

KIND_NAMES: tuple[str, ...] = tuple(KINDS)

COMMAND_KINDS: tuple[str, ...] = tuple(k for k, spec in KINDS.items() if spec.injector)
"""Kinds carried out by a command to the member itself: the same on every platform (their one
`injector`), with no platform engine or API call."""


def kinds_with_field(name: str) -> tuple[str, ...]:
    """The kinds `name` is a field of (empty: a field of every kind)."""
    return tuple(k for k, spec in KINDS.items() if name in spec.fields.model_fields)


def kind_only_fields() -> tuple[str, ...]:
    """Every field that belongs to some kinds only."""
    return tuple(dict.fromkeys(f for spec in KINDS.values() for f in spec.fields.model_fields))


def ways_of(kind: str, platform: str) -> tuple[Way, ...]:
    """The ways the registered `platform` carries `kind` out by, an engine's first way being
    its default and the first way's engine the default engine: the kind's own `way` if it is
    done the same on every platform, else the platform's (none: refused when loaded)."""
    found = registry.platforms().get(platform)
    if found is None:
        return ()
    spec = KINDS[kind]
    return (spec.way,) if spec.way is not None else tuple(found.ways.get(kind, ()))


def available_kinds(platform: str) -> tuple[str, ...]:
    """The kinds `platform` carries out: those it has a way and an injector for, and those done
    the same on every platform (their one way and injector)."""
    injectors = registry.platform(platform).injectors
    return tuple(
        k
        for k, spec in KINDS.items()
        if ways_of(k, platform) and (spec.injector is not None or k in injectors)
    )


def _shares_column(one: Platform, other: Platform) -> bool:
    return one.title == other.title and one.ways == other.ways


def _columns() -> dict[str, Platform]:
    """The tables' platform columns, each by the first registered platform in it: platforms
    with the same title and ways share one (local the sandbox's)."""
    columns: dict[str, Platform] = {}
    for name, platform in registry.platforms().items():
        if not any(_shares_column(platform, first) for first in columns.values()):
            columns[name] = platform
    return columns


def platform_column(platform: str) -> str:
    """The column of the tables a platform's faults are in ("local" shares the sandbox's)."""
    found = registry.platforms().get(platform)
    if found is None:
        return platform
    return next(name for name, first in _columns().items() if _shares_column(found, first))


def way_of(platform: str, fault: Any) -> Way | None:
    """The way `platform` carries `fault` out, from its kind, engine and options; None when
    the platform has none (its own check refuses the fault)."""
    ways = ways_of(fault.kind, platform)
    if not ways:
        return None
    engine = fault.engine or ways[0].engine
    for way in ways:
        if way.engine not in (None, engine):
            continue
        if way.when is None or way.when.applies(fault):
            return way
    return None


def privileges_of(platform: str, fault: Any) -> tuple[str, ...]:
    """What injecting and reverting `fault` on `platform` needs (its way's `privileges`)."""
    way = way_of(platform, fault)
    return way.privileges if way is not None else ()


def opt_in_problem(platform: str, fault: Any) -> str | None:
    """Why `fault` may not run on `platform` as written: its way is approximate or one-way and
    the fault does not say it accepts that; None when it may."""
    way = way_of(platform, fault)
    if way is None or way.support == "exact" or getattr(fault, OPT_IN[way.support]):
        return None
    what = {"approximate": "an approximation", "one-way": "one-way: it cannot be undone"}
    return (
        f"{what[way.support]} ({way.line(fault.kind, platform)}); set "
        f"`{OPT_IN[way.support]}: true` on the fault to run it"
    )


def approximation(platform: str, fault: Any) -> str | None:
    """What `platform` does instead of `fault` when it only approximates it (result.json's
    `approximation`), else None."""
    way = way_of(platform, fault)
    return way.how if way is not None and way.support == "approximate" else None


def is_one_way(platform: str, fault: Any) -> bool:
    """Whether `fault` on `platform` cannot be undone within the run."""
    way = way_of(platform, fault)
    return way is not None and way.support == "one-way"


_MARKS: dict[Support, str] = {"exact": "", "approximate": " *approx.*", "one-way": " *one-way*"}


def _cell(ways: tuple[Way, ...]) -> str:
    if not ways:
        return "refused when loaded"
    return "; ".join(f"{way.how}{_MARKS[way.support]}" for way in ways)


def fault_table() -> str:
    """The README's table of kinds: what each does and its own fields (Markdown)."""
    lines = ["| kind | what it does | its own fields |", "|---|---|---|"]
    lines += [f"| `{s.kind}` | {s.meaning} | {s.fields_doc} |" for s in KINDS.values()]
    return "\n".join(lines) + "\n"


def support_table() -> str:
    """The README's fault-by-platform table: what each platform really does (Markdown)."""
    columns = _columns()
    head = " | ".join(platform.title for platform in columns.values())
    lines = [f"| fault | {head} |", "|---" * (len(columns) + 1) + "|"]
    for spec in KINDS.values():
        cells = " | ".join(_cell(ways_of(spec.kind, column)) for column in columns)
        lines.append(f"| `{spec.kind}` | {cells} |")
    return "\n".join(lines) + "\n"


def platform_table(platform: str) -> str:
    """One platform's ways, one row each: kind, engine, when, what is done, support and the
    privileges it needs (Markdown)."""
    lines = ["| fault | engine | when | what is done | support | privileges |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for spec in KINDS.values():
        ways = ways_of(spec.kind, platform)
        if not ways:
            lines.append(f"| `{spec.kind}` | | | refused when loaded | | |")
        for way in ways:
            opt_in = f" (`{OPT_IN[way.support]}: true`)" if way.support in OPT_IN else ""
            needs = "; ".join(f"`{p}`" for p in way.privileges)
            when = way.when.words if way.when is not None else ""
            lines.append(f"| `{spec.kind}` | {way.engine or ''} | {when} | "
                         f"{way.how} | {way.support}{opt_in} | {needs} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def platform_names() -> tuple[str, ...]:
    """The platforms `rsdrill faults --platform` knows: the registered ones."""
    return tuple(registry.platforms())


def faults_json(platform: str | None = None) -> dict[str, Any]:
    """Every kind with its fields and, per platform (or only `platform`), its ways."""
    columns = [platform] if platform else list(_columns())
    return {
        "kinds": [
            {
                "kind": spec.kind,
                "meaning": spec.meaning,
                "fields": list(spec.fields.model_fields),
                "needs_duration": spec.needs_duration,
                "platforms": {
                    (platform or column): [
                        {"how": w.how, "support": w.support, "engine": w.engine,
                         "when": w.when.words if w.when is not None else None,
                         "opt_in": OPT_IN.get(w.support), "privileges": list(w.privileges)}
                        for w in ways_of(spec.kind, column)
                    ]
                    for column in columns
                },
            }
            for spec in KINDS.values()
        ]
    }  # fmt: skip


FAULTS_DOC_HEAD = """# Fault kinds and what each platform really does

Generated from `rsdrill/experiment/kinds.py` (`rsdrill faults` prints the same; a test fails
when this file differs: regenerate it with `python -m rsdrill.experiment.kinds > docs/faults.md`).

A way marked *approx.* does something close to the fault, not the fault itself: it runs only
when the fault says `approximate: true`, and result.json records `"approximation"` on that
fault. A way marked *one-way* cannot be undone within the run: it runs only with
`one_way: true`, and `rsdrill plan` and `rsdrill check` mark it. Which way a fault takes
follows from its platform, its `engine` and the options in the "when" column.

The "privileges" column of each platform's table is what the identity rsdrill runs as needs to
inject and revert that way (`rsdrill faults --platform P` prints it too): Kubernetes RBAC
(`verbs resource[/subresource][.group]`, in the target's namespace unless marked
cluster-wide; every run also gets its pods, and lists them with a `selector`), AWS IAM actions
(every run also describes instances and volumes), vSphere privileges (every run also needs
System.View and System.Read). The Kubernetes preflight and the Role `rsdrill schedule render`
writes, and the IAM actions and vSphere privileges `rsdrill plan` lists, are read from it.
"""


def faults_doc() -> str:
    """docs/faults.md: both tables and one table per platform (Markdown)."""
    parts = [FAULTS_DOC_HEAD, "## Kinds\n", fault_table(), "## Fault by platform\n",
             support_table()]  # fmt: skip
    for column, platform in _columns().items():
        parts += [f"## {platform.title}\n", platform_table(column)]
    return "\n".join(parts)


if __name__ == "__main__":
    print(faults_doc(), end="")
