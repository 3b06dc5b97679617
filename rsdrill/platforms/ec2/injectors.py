"""Faults on AWS EC2 and EBS (`platform: ec2`), through boto3 — imported lazily, and only in
this package.

One factory per fault kind (the platform's `injectors` table) builds the injector for one
fault on one member's instance, by the fault's engine; `preflight()` asks EC2 (DryRun)
whether the credentials may make every call the experiment needs, before anything is injected;
`REVERT_ACTIONS` carry out journaled revert actions from the journal alone (for
`rsdrill recover`). Actions carry only non-secret connection settings: credentials come from
boto3's standard chain when the action is carried out.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rsdrill.faults import SelectDomain
from rsdrill.layout import same_set
from rsdrill.platforms.base import TargetError
from rsdrill.platforms.domain_members import members_in
from rsdrill.platforms.ec2 import fis, ssm
from rsdrill.platforms.ec2.acl import AclPartition, ZoneAclIsolation
from rsdrill.platforms.ec2.client import Aws, AwsError, Connection
from rsdrill.platforms.ec2.instance import InstanceKill
from rsdrill.platforms.ec2.lookup import Instance, find_data_volume
from rsdrill.platforms.ec2.network import SecurityGroupPartition
from rsdrill.platforms.ec2.options import Ec2Fault, engine_of, needs_data_volume, wipes_volume
from rsdrill.platforms.ec2.volume import IopsThrottle, VolumeDetach

if TYPE_CHECKING:
    from rsdrill.experiment.schema import Fault
    from rsdrill.faults import (
        CpuStarveFault,
        DiskFault,
        DiskFillFault,
        HostFreezeFault,
        HostKillFault,
        IopsThrottleFault,
        MemoryPressureFault,
        NetworkDegradeFault,
        NetworkPartitionFault,
        VolumeDetachFault,
        ZoneOutageFault,
    )
    from rsdrill.platforms.base import Injector, InjectorFactory, KindFault
    from rsdrill.platforms.ec2.options import Ec2Platform
    from rsdrill.platforms.ec2.target import Ec2Target

__all__ = ["REVERT_ACTIONS", "Aws", "AwsError", "Connection", "preflight"]


@dataclass(frozen=True)
class OnInstance:
    """Where an EC2 fault lands: the member's instance as found when the fault is due, the
    other members' instances (a partition cuts it from them) and the platform's section."""

    aws: Aws
    platform: Ec2Platform
    instance: Instance
    peers: tuple[Instance, ...]

    def data_volume(self, fault: Fault) -> tuple[str, str] | None:
        """(volume id, device) of the member's EBS data volume when the fault acts on it."""
        if needs_data_volume(fault) and self.platform.volume is not None:
            return find_data_volume(self.aws, self.platform.volume, self.instance)
        return None

    def fis(self, fault: Fault, action: fis.FisAction) -> Injector:
        """`action` as a FIS experiment on the instance."""
        assert self.platform.fis_role_arn is not None  # check_experiment requires it
        return fis.FisExperiment(self.aws, self.instance, fault.kind, action,
                                 self.platform.fis_role_arn,
                                 stop_alarm_arn=self.platform.fis_stop_alarm_arn)  # fmt: skip


def on_member_instance(
    build: Callable[[OnInstance, KindFault], Injector],
) -> InjectorFactory[KindFault]:
    """The factory `(target, fault, host)` that builds with `build` on the member's instance,
    looked up again now: its state and volumes may have changed since setup. Its peers are the
    other members of its own replica set (of a sharded target, the other sets' members and the
    routers reach it as clients do)."""

    @functools.wraps(build)
    def factory(target: Ec2Target, fault: KindFault, host: str) -> Injector:
        own_set = same_set(target.members, target.layout, host)
        peers = tuple(i for member, i in target.instances.items()
                      if member != host and member in own_set)  # fmt: skip
        return build(OnInstance(target.aws, target.ec2, target.instance(host), peers), fault)

    return factory


def _held(fault: Fault) -> float:
    """How long a FIS action keeps the fault in force (FIS ends it by itself)."""
    return fault.revert_after or fault.duration or 0.0


@on_member_instance
def host_kill(on: OnInstance, fault: HostKillFault) -> Injector:
    """Stop (force), reboot or terminate the instance; or FIS aws:ec2:stop-instances."""
    data = on.data_volume(fault)
    if engine_of(fault) == "fis":
        return on.fis(fault, fis.stop_instances(on.aws, on.instance, _held(fault)))
    options = fault.section("ec2", Ec2Fault) or Ec2Fault()
    return InstanceKill(on.aws, on.instance, action=options.action, force=options.force,
                        one_way=fault.one_way,
                        restart=fault.restart is not False,
                        replace_volume=data if wipes_volume(fault) else None)  # fmt: skip


def zone_outage(target: Ec2Target, fault: ZoneOutageFault, host: str) -> Injector:
    """The zone's outage at `host`, one of its members (the run injects every member of the
    zone before it verifies any): way kill, the instance stopped (force) and started on
    revert; way isolate, its subnet's network ACL closed to everything outside the zone."""
    instance = target.instance(host)
    if fault.way == "kill":
        return InstanceKill(target.aws, instance, action="stop", force=True, one_way=False,
                            restart=True, replace_volume=None)  # fmt: skip
    assert isinstance(fault.select, SelectDomain)  # the kind's check
    members = same_set(target.members, target.layout, host)
    inside = members_in(target, fault.select, host, members)
    known = target.instances
    zone = tuple(instance if m == host else known[m] for m in inside if m in known)
    outside = tuple(known[m] for m in members if m in known and m not in inside)
    return ZoneAclIsolation(target.aws, instance, zone, outside)


@on_member_instance
def host_freeze(on: OnInstance, fault: HostFreezeFault) -> Injector:
    """SIGSTOP of mongod through SSM Run Command."""
    return ssm.SsmFault(on.aws, on.instance, fault.kind, ssm.freeze_scripts(on.platform.process))


@on_member_instance
def volume_detach(on: OnInstance, fault: VolumeDetachFault) -> Injector:
    """Force-detach the data volume; or FIS aws:ebs:pause-volume-io."""
    data = on.data_volume(fault)
    assert data is not None  # check_experiment requires target.ec2.volume
    if engine_of(fault) == "fis":
        return on.fis(fault, fis.pause_volume_io(on.aws, on.instance, data[0], _held(fault)))
    return VolumeDetach(on.aws, on.instance, *data)


@on_member_instance
def iops_throttle(on: OnInstance, fault: IopsThrottleFault) -> Injector:
    """mongod's cgroup io.max through SSM; ModifyVolume (api); or FIS volume latency."""
    engine = engine_of(fault)
    if engine == "ssm":
        limits = ssm.io_max_limits(fault)
        scripts = ssm.cgroup_io_scripts(on.platform.process, on.platform.dbpath, limits)
        return ssm.SsmFault(on.aws, on.instance, fault.kind, scripts)
    if engine == "fis":
        return _volume_latency(on, fault, operations=("any",), probability=1.0)
    data = on.data_volume(fault)
    assert data is not None  # check_experiment requires target.ec2.volume
    options = fault.section("ec2", Ec2Fault) or Ec2Fault()
    return IopsThrottle(on.aws, on.instance, data[0], iops=fault.iops,
                        throughput_mb_s=fault.throughput_mb_s,
                        accept_modification_limit=options.accept_modification_limit,
                        field="ec2.accept_modification_limit",
                        one_way=fault.one_way)  # fmt: skip


@on_member_instance
def disk_fault(on: OnInstance, fault: DiskFault) -> Injector:
    """FIS aws:ebs:volume-io-latency (EBS has no error injection)."""
    return _volume_latency(on, fault, operations=fault.operations, probability=fault.probability)


def _volume_latency(on: OnInstance, fault: DiskFault | IopsThrottleFault, *,
                    operations: tuple[str, ...],
                    probability: float) -> Injector:  # fmt: skip
    data = on.data_volume(fault)
    assert data is not None and fault.latency is not None  # check_experiment requires them
    return on.fis(fault, fis.volume_io_latency(on.aws, on.instance, data[0],
                                               duration_s=_held(fault), latency_s=fault.latency,
                                               probability=probability,
                                               operations=operations))  # fmt: skip


@on_member_instance
def network_partition(on: OnInstance, fault: NetworkPartitionFault) -> Injector:
    """Network ACL entries from the members; else a deny-all security group."""
    if fault.isolate_from == "members":
        return AclPartition(on.aws, on.instance, on.peers)
    return SecurityGroupPartition(on.aws, on.instance, outbound_too=fault.direction == "both")


@on_member_instance
def network_degrade(on: OnInstance, fault: NetworkDegradeFault) -> Injector:
    """FIS AWSFIS-Run-Network-Latency or -Packet-Loss."""
    options = fault.section("ec2", Ec2Fault) or Ec2Fault()
    return on.fis(fault, fis.ssm_network_degrade(on.aws, on.instance, duration_s=_held(fault),
                                                 latency_s=fault.latency, loss=fault.loss,
                                                 interface=options.interface))  # fmt: skip


@on_member_instance
def cpu_starve(on: OnInstance, fault: CpuStarveFault) -> Injector:
    """FIS AWSFIS-Run-CPU-Stress, sized from the instance type."""
    size = fis.instance_size(on.aws, on.instance)
    return on.fis(fault, fis.ssm_cpu_stress(on.aws, on.instance, size, duration_s=_held(fault),
                                            cpu_share=fault.cpu_share))  # fmt: skip


@on_member_instance
def memory_pressure(on: OnInstance, fault: MemoryPressureFault) -> Injector:
    """FIS AWSFIS-Run-Memory-Stress, sized from the instance type."""
    size = fis.instance_size(on.aws, on.instance)
    return on.fis(fault, fis.ssm_memory_stress(on.aws, on.instance, size,
                                               duration_s=_held(fault),
                                               memory_limit_mb=fault.memory_limit_mb))  # fmt: skip


@on_member_instance
def disk_fill(on: OnInstance, fault: DiskFillFault) -> Injector:
    """FIS AWSFIS-Run-Disk-Fill."""
    return on.fis(fault, fis.ssm_disk_fill(on.aws, on.instance, duration_s=_held(fault),
                                           fill_percent=fault.fill_percent))  # fmt: skip


def preflight(aws: Aws, platform: Ec2Platform, faults: tuple[Fault, ...],
              instances: list[Instance]) -> list[str]:  # fmt: skip
    """Problems found before anything is injected: calls the credentials may not make
    (EC2's DryRun flag), and iops-throttles the modification limit would refuse."""
    from rsdrill.platforms.ec2.preflight import problems

    return problems(aws, platform, faults, instances)


def _revert(handler: Callable[[Aws, dict[str, Any]], str]) -> Callable[[dict[str, Any]], str]:
    def carry_out(action: dict[str, Any]) -> str:
        try:
            return handler(Aws(Connection.from_action(action)), action)
        except (AwsError, KeyError, TypeError) as exc:
            raise TargetError(f"{action.get('action')}: {exc}") from None

    return carry_out


def _start(aws: Aws, action: dict[str, Any]) -> str:
    from rsdrill.platforms.ec2.instance import start_instance

    return start_instance(aws, action["instance_id"], action)


def _attach(aws: Aws, action: dict[str, Any]) -> str:
    from rsdrill.platforms.ec2.volume import attach_volume

    return attach_volume(aws, action)


def _restore_volume(aws: Aws, action: dict[str, Any]) -> str:
    from rsdrill.platforms.ec2.volume import restore_volume

    return restore_volume(aws, action)


def _restore_groups(aws: Aws, action: dict[str, Any]) -> str:
    from rsdrill.platforms.ec2.network import restore_security_groups

    return restore_security_groups(aws, action)


def _delete_acl_entries(aws: Aws, action: dict[str, Any]) -> str:
    from rsdrill.platforms.ec2.acl import delete_acl_entries

    return delete_acl_entries(aws, action)


def _ssm_command(aws: Aws, action: dict[str, Any]) -> str:
    from rsdrill.platforms.ec2.ssm import run_ssm_revert

    return run_ssm_revert(aws, action)


def _stop_fis(aws: Aws, action: dict[str, Any]) -> str:
    from rsdrill.platforms.ec2.fis import stop_fis_experiment

    return stop_fis_experiment(aws, action)


REVERT_ACTIONS: dict[str, Callable[[dict[str, Any]], str]] = {
    "ec2.start-instances": _revert(_start),
    "ec2.attach-volume": _revert(_attach),
    "ec2.modify-volume": _revert(_restore_volume),
    "ec2.restore-security-groups": _revert(_restore_groups),
    "ec2.delete-acl-entries": _revert(_delete_acl_entries),
    "ec2.ssm-command": _revert(_ssm_command),
    "ec2.stop-fis-experiment": _revert(_stop_fis),
}
