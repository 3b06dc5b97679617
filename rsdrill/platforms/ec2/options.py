"""`platform: ec2`: where the instances are, how members map to them, per-fault options, and
which faults EC2 can inject (checked when the file is loaded, before anything is touched).

Credentials never appear here: boto3 finds them in its standard chain (environment, shared
config and credentials files through `profile`, the instance's role).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import BeforeValidator, Field, model_validator

from rsdrill.experiment.catalog import privileges_of
from rsdrill.faults import COMMAND_KINDS
from rsdrill.fields import Duration, FieldProblem, Strict, refuse_partition_shapes

if TYPE_CHECKING:
    from rsdrill.experiment.schema import Experiment, Fault
    from rsdrill.faults import HostKillFault, IopsThrottleFault, NetworkDegradeFault


class MemberInstances(Strict):
    """How a member (host:port from the set's hello) is found among the instances."""

    by: Literal["private-ip", "private-dns", "tag", "map"] = Field(
        "private-ip",
        description="private-ip / private-dns: the member's host is the instance's private "
        "address or name; tag: the instance carries tag `tag` whose value is the member's "
        "host:port (or host); map: the explicit `map`",
    )
    tag: str = Field("rsdrill:member", description="by: tag — the tag key")
    map: dict[str, str] = Field(
        default_factory=dict, description="by: map — member host:port → instance id"
    )

    @model_validator(mode="after")
    def _map_given(self) -> MemberInstances:
        if self.by == "map" and not self.map:
            raise FieldProblem(("map",), "by: map needs `map` (member host:port → instance id)")
        if self.by != "map" and self.map:
            raise FieldProblem(("map",), f"`map` is used with by: map, not by: {self.by}")
        for member, instance in self.map.items():
            if not instance.startswith("i-"):
                raise FieldProblem(("map", member), f"{instance!r} is not an instance id (i-...)")
        return self


class DataVolume(Strict):
    """Which EBS volume holds a member's data: the one attached at `device`, or the volume
    attached to the member's instance that carries tag `tag`."""

    device: str | None = Field(None, description="e.g. /dev/sdf (as the instance maps it)")
    tag: str | None = Field(
        None, description="a tag key; the data volume is the attached volume carrying it"
    )

    @model_validator(mode="after")
    def _one_way(self) -> DataVolume:
        if (self.device is None) == (self.tag is None):
            raise FieldProblem(("device",), "give exactly one of `device` or `tag`")
        return self


def _empty_is_none(value: object) -> object:
    return None if value == "" else value


# `${AWS_PROFILE:-}` in a file: empty means not given.
OptionalText = Annotated[str | None, BeforeValidator(_empty_is_none)]


class Ec2Platform(Strict):
    """The AWS account's region and how the set's members map to instances and volumes."""

    region: str = Field(description="e.g. eu-west-1")
    profile: OptionalText = Field(
        None, description="a profile of the shared AWS config (credentials stay there)"
    )
    endpoint_url: OptionalText = Field(
        None, description="an EC2-compatible endpoint instead of AWS's (e.g. a local emulator)"
    )
    instances: MemberInstances = Field(default_factory=MemberInstances)
    volume: DataVolume | None = Field(
        None, description="the members' data volume (volume-detach, iops-throttle, wipe)"
    )
    fis_role_arn: OptionalText = Field(
        None, description="engine: fis — the IAM role FIS assumes to act on the instances"
    )
    dbpath: str = Field(
        "/var/lib/mongo",
        description="engine: ssm — the members' data directory on the instances (iops-throttle "
        "caps the disk holding it)",
    )
    process: str = Field("mongod", description="engine: ssm — the member's process name")
    fis_stop_alarm_arn: OptionalText = Field(
        None,
        description="engine: fis — a CloudWatch alarm that stops the FIS experiment when it "
        "fires (its stop condition; default: none)",
    )
    poll_interval: Duration = Field(2.0, description="how often states are polled")
    wait_timeout: Duration = Field(
        300.0, description="the longest wait for a state (stopped, running, attached...)"
    )

    @model_validator(mode="after")
    def _positive_waits(self) -> Ec2Platform:
        if self.poll_interval <= 0:
            raise FieldProblem(("poll_interval",), "must be more than 0")
        if self.wait_timeout < self.poll_interval:
            raise FieldProblem(("wait_timeout",), "must be at least `poll_interval`")
        return self


class Ec2Fault(Strict):
    """Options of one fault on ec2 (`faults[i].ec2`)."""

    action: Literal["stop", "reboot", "terminate"] = Field(
        "stop", description="host-kill: stop (restarted on revert), reboot, or terminate"
    )
    force: bool = Field(
        True, description="host-kill stop: force (no clean OS shutdown: a lost host)"
    )
    allow_terminate: bool = Field(
        False, description="the old spelling of the fault's `one_way: true` (refused, said so)"
    )
    accept_modification_limit: bool = Field(
        False,
        description="iops-throttle: go ahead although AWS may refuse a second modification of "
        "the volume within 6 hours (the restore on revert is one)",
    )
    interface: str = Field(
        "eth0",
        pattern=r"^[A-Za-z0-9_.:-]{1,15}$",
        description="network-degrade (engine fis): the instance's network interface netem shapes",
    )


ENGINES = ("api", "fis", "ssm")
# The engine of a fault that names none: api, but an iops-throttle's exact, revertible cap
# (ModifyVolume, api's, cannot be restored for 6 hours: it needs `engine: api` and `one_way`).
_DEFAULT_ENGINE = {"iops-throttle": "ssm"}
# What each engine can do on ec2 (stepdown is the runner's, on every platform).
_KINDS = {
    "api": (
        "host-kill",
        "volume-detach",
        "iops-throttle",
        "network-partition",
        "zone-outage",
        *COMMAND_KINDS,
    ),
    "fis": (
        "host-kill",
        "volume-detach",
        "iops-throttle",
        "disk-fault",
        "network-degrade",
        "cpu-starve",
        "memory-pressure",
        "disk-fill",
        *COMMAND_KINDS,
    ),
    "ssm": ("iops-throttle", "host-freeze", *COMMAND_KINDS),
}
_WHY_NOT = {
    "host-freeze": "EC2 cannot pause an instance (hibernation writes RAM to disk and stops it): "
    "host-freeze on ec2 needs engine: ssm (SIGSTOP of mongod through SSM Run Command)",
    "disk-fault": "EBS has no error injection; volume I/O latency needs engine: fis "
    "(aws:ebs:volume-io-latency)",
}


def _problem(i: int, *at: str | int, text: str) -> FieldProblem:
    return FieldProblem(("faults", i, *at), text)


def engine_of(fault: Fault) -> str:
    """The fault's engine, or the default engine for its kind."""
    return fault.engine or _DEFAULT_ENGINE.get(fault.kind, "api")


def wipes_volume(fault: Fault) -> bool:
    """host-kill with `restart.volume: wipe`: the member comes back on a new, empty volume."""
    return bool(fault.kind == "host-kill" and fault.restart and fault.restart.volume == "wipe")


def needs_data_volume(fault: Fault) -> bool:
    """Whether the fault acts on the member's EBS data volume (a wipe replaces it); engine
    ssm finds the disk on the instance itself."""
    on_volume = fault.kind in ("volume-detach", "iops-throttle", "disk-fault")
    return wipes_volume(fault) or (on_volume and engine_of(fault) != "ssm")


def check_experiment(exp: Experiment) -> None:
    """Refuse what EC2 cannot do, naming the field: unsupported kinds and engines, options of
    another kind, terminate without permission, volume faults without `target.ec2.volume`."""
    platform = exp.target.section("ec2", Ec2Platform)
    assert platform is not None  # the schema requires the section
    for i, fault in enumerate(exp.faults):
        engine = engine_of(fault)
        if engine not in ENGINES:
            raise _problem(i, "engine", text=f"engine {engine!r} is not one of ec2's: "
                           f"{', '.join(ENGINES)}")  # fmt: skip
        if fault.kind not in _KINDS[engine]:
            others = [e for e in ENGINES if fault.kind in _KINDS[e]]
            why = _WHY_NOT.get(fault.kind) if engine == "api" else None
            if why is None and others:
                why = f"{fault.kind} on ec2 needs engine: {' or '.join(others)}"
            raise _problem(i, "kind", text=why or _WHY_NOT.get(
                fault.kind, f"{fault.kind} is not available on ec2 (yet)"))  # fmt: skip
        if fault.scope != "member":
            raise _problem(i, "scope", text="on ec2 a member's host is its instance: "
                           "scope must be member")  # fmt: skip
        if engine == "fis" and fault.kind not in COMMAND_KINDS and platform.fis_role_arn is None:
            raise FieldProblem(("target", "ec2", "fis_role_arn"),
                               f"faults[{i}] uses engine: fis, which needs the IAM role FIS "
                               "assumes (fis_role_arn)")  # fmt: skip
        if needs_data_volume(fault) and not wipes_volume(fault) and platform.volume is None:
            raise FieldProblem(("target", "ec2", "volume"),
                               f"faults[{i}] ({fault.kind}) needs the members' data volume: "
                               "target.ec2.volume with `device` or `tag`")  # fmt: skip
        if fault.kind == "network-partition":
            refuse_partition_shapes(i, fault, "ec2 swaps the instance's security groups")
        _check_kind(i, fault, engine, platform)


def _check_kind(i: int, fault: Fault, engine: str, platform: Ec2Platform) -> None:
    section = fault.section("ec2", Ec2Fault)
    options = section or Ec2Fault()
    given = section.model_fields_set if section else set()
    host_kill_only = {"action", "force", "allow_terminate"} & given
    if fault.kind != "host-kill" and host_kill_only:
        raise _problem(
            i, "ec2", sorted(host_kill_only)[0], text=f"applies to host-kill, not {fault.kind}"
        )
    if fault.kind != "iops-throttle" and "accept_modification_limit" in given:
        raise _problem(
            i,
            "ec2",
            "accept_modification_limit",
            text=f"applies to iops-throttle, not {fault.kind}",
        )
    if fault.kind != "network-degrade" and "interface" in given:
        raise _problem(i, "ec2", "interface", text=f"applies to network-degrade, not {fault.kind}")
    if engine == "fis":
        _check_fis_duration(i, fault)
    if fault.kind == "host-kill":
        _check_host_kill(i, fault, engine, options, platform)
    elif fault.kind == "iops-throttle":
        _check_iops(i, fault, engine)
    elif fault.kind == "disk-fault":
        if fault.latency is None:
            raise _problem(i, "latency", text="a disk-fault on ec2 (aws:ebs:volume-io-latency) "
                           "adds latency: give `latency`")  # fmt: skip
        if fault.errno != "none":
            raise _problem(i, "errno", text="EBS cannot return I/O errors: set errno: none "
                           "(latency only)")  # fmt: skip
        if fault.path is not None:
            raise _problem(i, "path", text="aws:ebs:volume-io-latency acts on the whole volume: "
                           "drop `path`")  # fmt: skip
        if fault.replica is not None:
            raise _problem(i, "replica", text="an EBS volume's copies are AWS's, not rsdrill's "
                           "to fail one by one: drop `replica`")  # fmt: skip
    elif fault.kind == "network-degrade":
        _check_degrade(i, fault)
    elif fault.kind == "network-partition":
        if fault.isolate_from == "clients":
            raise _problem(i, "isolate_from", text="on ec2 a partition cuts the member from the "
                           "other members (network ACL entries) or from everyone (a "
                           "security-group swap): use members or all")  # fmt: skip
        if fault.isolate_from == "members" and fault.direction != "both":
            raise _problem(i, "direction", text="network ACL entries are stateless: denying "
                           "one direction breaks TCP both ways; use direction: both")  # fmt: skip
        if fault.direction == "outbound":
            raise _problem(i, "direction", text="security groups cannot block only outbound "
                           "traffic while keeping the original inbound rules: use both or "
                           "inbound")  # fmt: skip


# FIS action durations: startInstancesAfterDuration from 1 minute, any action up to 12 hours.
_FIS_MIN_RESTART_S = 60.0
_FIS_MAX_S = 12 * 3600.0


def _check_fis_duration(i: int, fault: Fault) -> None:
    seconds = fault.revert_after
    if seconds is None:
        return
    field = "restart" if fault.kind == "host-kill" and fault.duration is None else "duration"
    if fault.kind == "host-kill" and seconds < _FIS_MIN_RESTART_S:
        raise _problem(i, field, text="engine: fis restarts the instance at least a minute "
                       "later (startInstancesAfterDuration >= 1m)")  # fmt: skip
    if seconds > _FIS_MAX_S:
        raise _problem(i, field, text="FIS actions last at most 12h")


def _check_host_kill(
    i: int, fault: HostKillFault, engine: str, options: Ec2Fault, platform: Ec2Platform
) -> None:
    if engine == "fis" and options.action != "stop":
        raise _problem(i, "ec2", "action", text="engine: fis stops instances "
                       "(aws:ec2:stop-instances): action must be stop")  # fmt: skip
    if engine == "fis" and fault.restart is False:
        raise _problem(
            i,
            "restart",
            text="engine: fis restarts the instance "
            "(startInstancesAfterDuration): restart: false needs engine: api",
        )
    if "allow_terminate" in options.model_fields_set:
        raise _problem(i, "ec2", "allow_terminate", text="the old spelling: write `one_way: "
                       "true` on the fault (every one-way fault needs it)")  # fmt: skip
    if fault.restart and fault.restart.model == "ha":
        raise _problem(i, "restart", "model", text="model ha is vSphere HA's restart (sandbox, "
                       "local, vsphere); on ec2 set when the instance starts again with "
                       "restart.after")  # fmt: skip
    if options.action == "terminate" and fault.restart is not False:
        raise _problem(i, "restart", text="a terminated instance cannot be restarted: "
                       "set restart: false")  # fmt: skip
    if options.action == "reboot" and fault.restart is not False:
        raise _problem(i, "restart", text="a rebooted instance comes back by itself: set "
                       "restart: false")  # fmt: skip
    if fault.restart and fault.restart.volume == "wipe":
        if engine == "fis":
            raise _problem(i, "restart", "volume", text="volume: wipe replaces the data volume "
                           "before the restart, which needs engine: api")  # fmt: skip
        if platform.volume is None:
            raise FieldProblem(("target", "ec2", "volume"),
                               f"faults[{i}] restarts on a fresh volume (wipe): target.ec2."
                               "volume must say which volume holds the data")  # fmt: skip


def _check_iops(i: int, fault: IopsThrottleFault, engine: str) -> None:
    split = [f for f in ("read_iops", "write_iops", "read_mb_s", "write_mb_s")
             if getattr(fault, f) is not None]  # fmt: skip
    if engine == "ssm":
        together = [f for f in ("iops", "throughput_mb_s", "latency") if getattr(fault, f)]
        if together or not split:
            # Without an engine, say how to get the volume-wide limit instead.
            api = ("" if fault.engine else "; or engine: api with one_way: true to lower the "
                   "volume's provisioned IOPS (ModifyVolume: AWS allows the restore only 6 h "
                   "later)")  # fmt: skip
            raise _problem(i, together[0] if together else "read_iops", text="cgroup io.max "
                           "(engine ssm) caps reads and writes separately: give read_iops, "
                           f"write_iops, read_mb_s and/or write_mb_s (no latency){api}",
                           )  # fmt: skip
        return
    if split:
        raise _problem(i, split[0], text="EBS limits reads and writes together: use iops / "
                       "throughput_mb_s")  # fmt: skip
    if engine == "fis":
        # FIS has no IOPS limit: it slows the volume's I/O (aws:ebs:volume-io-latency).
        given = [f for f in ("iops", "throughput_mb_s") if getattr(fault, f) is not None]
        if given or fault.latency is None:
            raise _problem(i, given[0] if given else "latency", text="engine: fis slows the "
                           "volume with aws:ebs:volume-io-latency: give `latency` (for an IOPS "
                           "limit use engine: api)")  # fmt: skip
        return
    if fault.iops is None and fault.throughput_mb_s is None:
        raise _problem(i, "iops", text="engine: api sets the volume's provisioned IOPS and/or "
                       "throughput: give `iops` or `throughput_mb_s`")  # fmt: skip
    if fault.latency is not None:
        raise _problem(i, "latency", text="modify_volume sets IOPS and throughput only: drop "
                       "`latency` (or use a disk-fault with engine: fis)")  # fmt: skip


_DESCRIBE = ("ec2:DescribeInstances", "ec2:DescribeVolumes")


def iam_actions(fault: Fault) -> tuple[str, ...]:
    """The IAM actions injecting and reverting `fault` needs (beyond describing): its way's
    privileges in the spec."""
    return privileges_of("ec2", fault)


def plan_details(exp: Experiment) -> list[str]:
    """How each fault is carried out on EC2 and the IAM actions the credentials need."""
    platform = exp.target.section("ec2", Ec2Platform)
    assert platform is not None  # the schema requires the section
    where = platform.endpoint_url or f"AWS {platform.region}"
    lines = [f"EC2 at {where}; members → instances by {platform.instances.by}; credentials "
             "from boto3's chain (checked with DryRun before anything is injected)"]  # fmt: skip
    needed: list[str] = list(_DESCRIBE)
    for i, fault in enumerate(exp.faults):
        actions = iam_actions(fault)
        if not actions:
            continue
        engine = engine_of(fault)
        lines.append(f"faults[{i}] {fault.kind} (engine {engine}): {', '.join(actions)}")
    # A matrix may vary the faults (volume: keep or wipe): every run's calls are needed.
    for _, variant in exp.variants():
        for fault in variant.faults:
            needed += [a for a in iam_actions(fault) if a not in needed]
    lines.append(f"IAM actions needed: {', '.join(needed)}")
    return lines


def _check_degrade(i: int, fault: NetworkDegradeFault) -> None:
    """FIS's SSM documents run netem on the instance's interface: one of latency or loss, on
    everything it sends."""
    for name in ("jitter", "bandwidth_mbit_s", "duplicate", "corrupt", "reorder"):
        if name in fault.model_fields_set:
            raise _problem(i, name, text=f"{name} on ec2: FIS's AWSFIS-Run-Network documents "
                           "give latency or packet loss only")  # fmt: skip
    if fault.latency is not None and fault.loss is not None:
        raise _problem(i, "loss", text="one FIS SSM document adds latency or loss, not both: "
                       "split it into two faults")  # fmt: skip
    if fault.between != "all":
        raise _problem(i, "between", text="netem on the instance's interface shapes all its "
                       "traffic: between all")  # fmt: skip
    if fault.direction != "outbound":
        raise _problem(i, "direction", text="netem on the instance's interface shapes what it "
                       "sends: write direction: outbound")  # fmt: skip
