"""Faults on AWS EC2 and EBS (`platform: ec2`), through boto3 — imported lazily, and only in
this package.

`ec2_injector()` builds the injector for one fault on one member; `preflight()` asks EC2
(DryRun) whether the credentials may make every call the experiment needs, before anything is
injected; `REVERT_ACTIONS` carry out journaled revert actions from the journal alone (for
`rsdrill recover`). Actions carry only non-secret connection settings: credentials come from
boto3's standard chain when the action is carried out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rsdrill.platforms.base import TargetError
from rsdrill.platforms.ec2.client import Aws, AwsError, Connection

if TYPE_CHECKING:
    from rsdrill.experiment.schema import Fault
    from rsdrill.platforms.base import Injector
    from rsdrill.platforms.ec2.lookup import Instance
    from rsdrill.platforms.ec2.options import Ec2Platform

__all__ = ["REVERT_ACTIONS", "Aws", "AwsError", "Connection", "ec2_injector", "preflight"]


def connection(platform: Ec2Platform) -> Connection:
    return Connection(
        region=platform.region,
        profile=platform.profile,
        endpoint_url=platform.endpoint_url,
        poll_interval=platform.poll_interval,
        wait_timeout=platform.wait_timeout,
    )


def ec2_injector(
    aws: Aws,
    platform: Ec2Platform,
    fault: Fault,
    instance: Instance,
    peers: tuple[Instance, ...] = (),
) -> Injector:
    """The injector for `fault` on the member whose host is `instance` (`peers`: the other
    members' instances, which a partition cuts it from)."""
    from rsdrill.platforms.ec2 import fis
    from rsdrill.platforms.ec2.acl import AclPartition
    from rsdrill.platforms.ec2.instance import InstanceKill
    from rsdrill.platforms.ec2.lookup import find_data_volume
    from rsdrill.platforms.ec2.network import SecurityGroupPartition
    from rsdrill.platforms.ec2.options import (
        Ec2Fault,
        engine_of,
        needs_data_volume,
        wipes_volume,
    )
    from rsdrill.platforms.ec2.volume import IopsThrottle, VolumeDetach

    options = fault.ec2 or Ec2Fault()
    wipe = wipes_volume(fault)
    data = None
    if needs_data_volume(fault) and platform.volume is not None:
        data = find_data_volume(aws, platform.volume, instance)
    duration = fault.revert_after or fault.duration or 0.0
    engine = engine_of(fault)
    if engine == "ssm":
        from rsdrill.platforms.ec2 import ssm

        if fault.kind == "host-freeze":
            scripts = ssm.freeze_scripts(platform.process)
        else:
            limits = ssm.io_max_limits(fault)
            scripts = ssm.cgroup_io_scripts(platform.process, platform.dbpath, limits)
        return ssm.SsmFault(aws, instance, fault.kind, scripts)
    if engine == "fis":
        assert platform.fis_role_arn is not None  # check_experiment requires it
        if fault.kind == "host-kill":
            action = fis.stop_instances(aws, instance, duration)
        elif fault.kind == "volume-detach":
            assert data is not None
            action = fis.pause_volume_io(aws, instance, data[0], duration)
        elif fault.kind == "network-degrade":
            action = fis.ssm_network_degrade(aws, instance, duration_s=duration,
                                             latency_s=fault.latency, loss=fault.loss,
                                             interface=options.interface)  # fmt: skip
        elif fault.kind == "cpu-starve":
            action = fis.ssm_cpu_stress(aws, instance, fis.instance_size(aws, instance),
                                        duration_s=duration, cpu_share=fault.cpu_share)  # fmt: skip
        elif fault.kind == "memory-pressure":
            action = fis.ssm_memory_stress(aws, instance, fis.instance_size(aws, instance),
                                           duration_s=duration,
                                           memory_limit_mb=fault.memory_limit_mb)  # fmt: skip
        elif fault.kind == "disk-fill":
            action = fis.ssm_disk_fill(aws, instance, duration_s=duration,
                                       fill_percent=fault.fill_percent)  # fmt: skip
        else:
            assert data is not None and fault.latency is not None
            operations = fault.operations if fault.kind == "disk-fault" else ("any",)
            probability = fault.probability if fault.kind == "disk-fault" else 1.0
            action = fis.volume_io_latency(aws, instance, data[0], duration_s=duration,
                                           latency_s=fault.latency, probability=probability,
                                           operations=operations)  # fmt: skip
        return fis.FisExperiment(aws, instance, fault.kind, action, platform.fis_role_arn,
                                 stop_alarm_arn=platform.fis_stop_alarm_arn)  # fmt: skip
    if fault.kind == "host-kill":
        return InstanceKill(aws, instance, action=options.action, force=options.force,
                            one_way=fault.one_way,
                            restart=fault.restart is not False,
                            replace_volume=data if wipe else None)  # fmt: skip
    if fault.kind == "volume-detach":
        assert data is not None
        return VolumeDetach(aws, instance, *data)
    if fault.kind == "iops-throttle":
        assert data is not None
        return IopsThrottle(aws, instance, data[0], iops=fault.iops,
                            throughput_mb_s=fault.throughput_mb_s,
                            accept_modification_limit=options.accept_modification_limit,
                            field="ec2.accept_modification_limit",
                            one_way=fault.one_way)  # fmt: skip
    if fault.kind == "network-partition" and fault.isolate_from == "members":
        return AclPartition(aws, instance, peers)
    if fault.kind == "network-partition":
        return SecurityGroupPartition(aws, instance, outbound_too=fault.direction == "both")
    raise AwsError(f"{fault.kind} is not available on ec2", "Unsupported")


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
