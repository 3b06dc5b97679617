"""Which instance is a member's host, and which of its volumes holds the member's data."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rsdrill.platforms.ec2.client import Aws, AwsError
from rsdrill.platforms.ec2.options import DataVolume, MemberInstances

# Instances that may still be a member's host (a terminated one never comes back).
_LIVE_STATES = ["pending", "running", "stopping", "stopped", "shutting-down"]


@dataclass(frozen=True)
class Instance:
    """What the faults need to know of a member's instance, read once."""

    id: str
    member: str
    state: str
    owner_id: str
    availability_zone: str
    vpc_id: str | None
    security_groups: tuple[str, ...]
    network_interfaces: int
    # device name → volume id
    volumes: dict[str, str]
    subnet_id: str | None = None
    private_ip: str | None = None
    instance_type: str = ""

    def arn(self, aws: Aws) -> str:
        return f"arn:{aws.partition}:ec2:{aws.conn.region}:{self.owner_id}:instance/{self.id}"


def _instance(reservation: dict[str, Any], raw: dict[str, Any], member: str) -> Instance:
    return Instance(
        id=raw["InstanceId"],
        member=member,
        state=raw["State"]["Name"],
        owner_id=reservation.get("OwnerId", ""),
        availability_zone=raw.get("Placement", {}).get("AvailabilityZone", ""),
        vpc_id=raw.get("VpcId"),
        security_groups=tuple(g["GroupId"] for g in raw.get("SecurityGroups", [])),
        network_interfaces=len(raw.get("NetworkInterfaces", [])),
        volumes={
            m["DeviceName"]: m["Ebs"]["VolumeId"]
            for m in raw.get("BlockDeviceMappings", [])
            if "Ebs" in m
        },
        subnet_id=raw.get("SubnetId"),
        private_ip=raw.get("PrivateIpAddress"),
        instance_type=raw.get("InstanceType", ""),
    )


def describe_instance(aws: Aws, instance_id: str, member: str = "") -> Instance:
    reservations = aws.ec2("describe_instances", InstanceIds=[instance_id])["Reservations"]
    found = [(r, i) for r in reservations for i in r["Instances"]]
    if not found:
        raise AwsError(f"InvalidInstanceID.NotFound: instance {instance_id} does not exist in "
                       f"{aws.conn.region}", "InvalidInstanceID.NotFound")  # fmt: skip
    return _instance(*found[0], member)


def instance_state(aws: Aws, instance_id: str) -> str:
    return describe_instance(aws, instance_id).state


def find_instance(aws: Aws, mapping: MemberInstances, member: str) -> Instance:
    """The one live instance that is `member`'s host; AwsError naming the member otherwise."""
    host = member.rsplit(":", 1)[0]
    if mapping.by == "map":
        if member not in mapping.map:
            raise AwsError(f"member {member} is not in target.ec2.instances.map "
                           f"({', '.join(mapping.map) or 'empty'})", "NotMapped")  # fmt: skip
        return describe_instance(aws, mapping.map[member], member)
    name, values = {
        "private-ip": ("private-ip-address", [host]),
        "private-dns": ("private-dns-name", [host]),
        "tag": (f"tag:{mapping.tag}", [member, host]),
    }[mapping.by]
    filters = [{"Name": name, "Values": values},
               {"Name": "instance-state-name", "Values": _LIVE_STATES}]  # fmt: skip
    reservations = aws.ec2("describe_instances", Filters=filters)["Reservations"]
    found = [(r, i) for r in reservations for i in r["Instances"]]
    if len(found) != 1:
        ids = ", ".join(i["InstanceId"] for _, i in found)
        raise AwsError(f"member {member}: {len(found)} instances match {name}={values[0]}"
                       + (f" ({ids})" if ids else "") + "; exactly one must",
                       "NoSingleInstance")  # fmt: skip
    return _instance(*found[0], member)


def find_data_volume(aws: Aws, spec: DataVolume, instance: Instance) -> tuple[str, str]:
    """(volume id, device) of the member's data volume, attached to its instance."""
    if spec.device is not None:
        volume = instance.volumes.get(spec.device)
        if volume is None:
            attached = ", ".join(f"{d} {v}" for d, v in instance.volumes.items()) or "none"
            raise AwsError(f"{instance.id} ({instance.member}) has no volume at {spec.device} "
                           f"(attached: {attached})", "NoDataVolume")  # fmt: skip
        return volume, spec.device
    volumes = aws.ec2("describe_volumes", Filters=[
        {"Name": "attachment.instance-id", "Values": [instance.id]},
        {"Name": "tag-key", "Values": [spec.tag]},
    ])["Volumes"]  # fmt: skip
    if len(volumes) != 1:
        raise AwsError(f"{instance.id} ({instance.member}): {len(volumes)} attached volumes "
                       f"carry tag {spec.tag}; exactly one must", "NoDataVolume")  # fmt: skip
    volume = volumes[0]
    device = next(a["Device"] for a in volume["Attachments"] if a["InstanceId"] == instance.id)
    return volume["VolumeId"], device


def describe_volume(aws: Aws, volume_id: str) -> dict[str, Any]:
    volumes = aws.ec2("describe_volumes", VolumeIds=[volume_id])["Volumes"]
    if not volumes:
        raise AwsError(f"InvalidVolume.NotFound: {volume_id}", "InvalidVolume.NotFound")
    return volumes[0]
