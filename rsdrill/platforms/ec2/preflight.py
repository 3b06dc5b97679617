"""Before anything is broken: may the credentials make the calls the experiment needs (EC2's
DryRun flag), and would AWS's volume modification limit refuse a throttle? A selection like
`primary` is resolved only at injection, so every member's instance is checked."""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from rsdrill.faults import COMMAND_KINDS
from rsdrill.platforms.ec2.client import Aws
from rsdrill.platforms.ec2.lookup import Instance, find_data_volume
from rsdrill.platforms.ec2.options import Ec2Fault

if TYPE_CHECKING:
    from rsdrill.experiment.schema import Fault
    from rsdrill.platforms.ec2.options import Ec2Platform


Call = tuple[str, dict[str, Any]]


def _calls(aws: Aws, fault: Fault, instance: Instance, data: tuple[str, str] | None) -> list[Call]:
    """The EC2 calls (with DryRun) that injecting and reverting `fault` will make."""
    from rsdrill.platforms.ec2.options import engine_of

    iid = {"InstanceIds": [instance.id]}
    engine = engine_of(fault)
    if engine == "ssm":
        return []
    if engine == "fis":
        # FIS has no DryRun; stopping instances is checked for the instance start on revert,
        # a stress for the instance type it is sized from.
        if fault.kind in ("cpu-starve", "memory-pressure"):
            return [("describe_instance_types", {"InstanceTypes": [instance.instance_type]})]
        return [("start_instances", iid)] if fault.kind == "host-kill" else []
    if fault.kind == "host-kill":
        action = (fault.section("ec2", Ec2Fault) or Ec2Fault()).action
        if action != "stop":
            return [(f"{action}_instances", iid)]
        calls: list[Call] = [("stop_instances", {**iid, "Force": True}), ("start_instances", iid)]
        if fault.restart and fault.restart.volume == "wipe" and data:
            calls += [("create_volume", {"AvailabilityZone": instance.availability_zone,
                                         "Size": 1}),
                      ("detach_volume", {"VolumeId": data[0], "InstanceId": instance.id,
                                         "Device": data[1]})]  # fmt: skip
        return calls
    if fault.kind == "zone-outage" and fault.way == "kill":  # each instance stopped, started
        return [("stop_instances", {**iid, "Force": True}), ("start_instances", iid)]
    if fault.kind == "zone-outage" and instance.subnet_id:  # its subnet's ACL, the subnets
        return [*_acl_entry_calls(aws, instance),
                ("describe_subnets", {"SubnetIds": [instance.subnet_id]})]  # fmt: skip
    if fault.kind == "volume-detach" and data:
        attach = {"VolumeId": data[0], "InstanceId": instance.id, "Device": data[1]}
        return [("detach_volume", {**attach, "Force": True}), ("attach_volume", attach)]
    if fault.kind == "iops-throttle" and data:
        return [("modify_volume", {"VolumeId": data[0]})]
    if fault.kind == "network-partition" and fault.isolate_from == "members":
        return _acl_entry_calls(aws, instance)
    if fault.kind == "network-partition" and instance.vpc_id:
        groups = list(instance.security_groups)
        return [("create_security_group", {"GroupName": "rsdrill-preflight",
                                           "Description": "DryRun only",
                                           "VpcId": instance.vpc_id}),
                ("modify_instance_attribute", {"InstanceId": instance.id, "Groups": groups}),
                ("delete_security_group", {"GroupId": groups[0]} if groups else {})]  # fmt: skip
    return []


def _zone_acl(aws: Aws, fault: Fault, instance: Instance) -> str | None:
    """Whether cutting off the instance's zone, if the fault's zone is its Availability Zone,
    would cut other zones too (its subnet's ACL guards theirs). A region or tag: found when
    injected."""
    from rsdrill.faults import SelectDomain
    from rsdrill.platforms.ec2.acl import shared_acl, subnet_acl, vpc_subnets

    zone = fault.select.zone if isinstance(fault.select, SelectDomain) else None
    if zone != instance.availability_zone or not instance.subnet_id or not instance.vpc_id:
        return None
    acl = subnet_acl(aws, instance.subnet_id)
    return shared_acl(instance, acl, [zone], vpc_subnets(aws, instance.vpc_id))


def _acl_entry_calls(aws: Aws, instance: Instance) -> list[Call]:
    """An ACL entry's creation and deletion; a DryRun of them needs an ACL: the one of the
    instance's own subnet."""
    if instance.subnet_id is None:
        return []
    from rsdrill.platforms.ec2.acl import subnet_acl

    acl = subnet_acl(aws, instance.subnet_id)["NetworkAclId"]
    entry = {"NetworkAclId": acl, "RuleNumber": 1, "Egress": False}
    return [("create_network_acl_entry", {**entry, "Protocol": "-1", "RuleAction": "deny",
                                          "CidrBlock": "192.0.2.1/32"}),
            ("delete_network_acl_entry", entry)]  # fmt: skip


def problems(
    aws: Aws,
    platform: Ec2Platform,
    faults: tuple[Fault, ...],
    instances: list[Instance],
    routers: Collection[str] = (),
) -> list[str]:
    """`routers`: the members of `instances` that are a sharded cluster's routers, which hold
    no data (their instances have no data volume to look for)."""
    from rsdrill.platforms.ec2.options import engine_of, needs_data_volume
    from rsdrill.platforms.ec2.volume import modification_limit

    found: list[str] = []
    asked: set[tuple[str, str]] = set()
    if any(engine_of(f) == "ssm" for f in faults if f.kind not in COMMAND_KINDS):
        from rsdrill.platforms.ec2.ssm import unmanaged

        # SSM has no DryRun: it is asked whether it can reach each instance at all.
        found += [p for p in map(lambda i: unmanaged(aws, i), instances) if p is not None]
    for instance in instances:
        data = None
        if platform.volume is not None and any(needs_data_volume(f) for f in faults) and \
                instance.member not in routers:  # fmt: skip
            data = find_data_volume(aws, platform.volume, instance)
        for i, fault in enumerate(faults):
            if fault.kind in COMMAND_KINDS:
                continue
            for operation, params in _calls(aws, fault, instance, data):
                if (operation, instance.id) in asked:
                    continue
                asked.add((operation, instance.id))
                refused = aws.dry_run(operation, **params)
                if refused:
                    found.append(f"{instance.member} ({instance.id}): {refused}")
            if fault.kind == "zone-outage" and fault.way == "isolate":
                problem = _zone_acl(aws, fault, instance)
                if problem:
                    found.append(f"faults[{i}] zone-outage: {problem}")
            accepted = (fault.section("ec2", Ec2Fault) or Ec2Fault()).accept_modification_limit
            if fault.kind == "iops-throttle" and engine_of(fault) == "api" and data and \
                    not accepted:  # fmt: skip
                limit = modification_limit(aws, data[0])
                if limit:
                    found.append(f"faults[{i}] iops-throttle on {instance.member}: {limit}; set "
                                 f"faults[{i}].ec2.accept_modification_limit: true to go ahead "
                                 "anyway")  # fmt: skip
    return found
