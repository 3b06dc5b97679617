"""moto's server on loopback for the EC2 tests: started once per session on a free port,
stopped after; plus helpers that build member-like instances (a security group, a gp3 data
volume at /dev/sdf) with boto3 directly, the way a user's account would look."""

from __future__ import annotations

import secrets
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rsdrill.platforms.sandbox.hosts import free_port_base
from tests.harness.processes import stop

REGION = "us-east-1"
# The AWS secret key the EC2 tests put in the environment: no output may ever contain it.
SECRET = "rsdrillFAKEsecretKEY/0123456789abcdefABCDEF"
DATA_DEVICE = "/dev/sdf"
START_TIMEOUT_S = 30.0


@contextmanager
def moto_server(log_path: Path) -> Iterator[str]:
    """moto's server on 127.0.0.1 and a free port; its endpoint URL. Fails loudly when moto's
    server extra is missing (it is in the dev dependencies)."""
    try:
        import flask  # noqa: F401  (moto[server] brings it)
        import moto  # noqa: F401
    except ImportError as exc:
        raise RuntimeError(
            f"moto[server] is not installed ({exc}): pip install 'moto[server]'"
        ) from None
    port = free_port_base(1)
    endpoint = f"http://127.0.0.1:{port}"
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1).close()
                break
            except (urllib.error.URLError, OSError):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto_server did not start (see {log_path})") from None
                time.sleep(0.1)
        yield endpoint
    finally:
        stop(proc)


def set_auth(endpoint: str, free_calls: float) -> None:
    """moto's IAM enforcement: every call after `free_calls` more is authenticated and
    authorized (inf: none ever is)."""
    request = urllib.request.Request(f"{endpoint}/moto-api/reset-auth",
                                     data=str(free_calls).encode(), method="POST",
                                     headers={"Content-Type": "text/plain"})  # fmt: skip
    urllib.request.urlopen(request, timeout=5).close()


def client(endpoint: str, service: str = "ec2", **keys: str) -> Any:
    import boto3

    return boto3.client(service, endpoint_url=endpoint, region_name=REGION, **keys)


@dataclass
class Member:
    """An instance standing for one member's host, with its data volume."""

    host: str
    instance_id: str
    volume_id: str
    group_id: str


_images: dict[str, str] = {}


def _image(ec2: Any) -> str:
    """An AMI moto knows (listing them takes seconds: once per endpoint)."""
    endpoint = ec2.meta.endpoint_url
    if endpoint not in _images:
        _images[endpoint] = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    return _images[endpoint]


def make_member(ec2: Any, host: str, *, volume_type: str = "gp3", subnet: int = 0) -> Member:
    """A running instance tagged rsdrill:member=host, in its own security group and the
    default VPC's `subnet`th subnet, with a data volume at /dev/sdf (gp3 6000 IOPS 500 MiB/s,
    or io1 1000 IOPS)."""
    image = _image(ec2)
    vpc = ec2.describe_vpcs()["Vpcs"][0]["VpcId"]
    group = ec2.create_security_group(GroupName=f"member-{secrets.token_hex(4)}",
                                      Description="member", VpcId=vpc)["GroupId"]  # fmt: skip
    subnets = ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [vpc]}])["Subnets"]
    subnet = sorted(subnets, key=lambda s: s["SubnetId"])[subnet]
    instance = ec2.run_instances(
        ImageId=image, MinCount=1, MaxCount=1, InstanceType="m5.large",
        SubnetId=subnet["SubnetId"], SecurityGroupIds=[group],
        TagSpecifications=[{"ResourceType": "instance",
                            "Tags": [{"Key": "rsdrill:member", "Value": host}]}],
    )["Instances"][0]  # fmt: skip
    limits = {"Iops": 6000, "Throughput": 500} if volume_type == "gp3" else {"Iops": 1000}
    volume = ec2.create_volume(
        AvailabilityZone=instance["Placement"]["AvailabilityZone"], Size=20,
        VolumeType=volume_type, **limits,
        TagSpecifications=[{"ResourceType": "volume",
                            "Tags": [{"Key": "rsdrill:data", "Value": host}]}],
    )["VolumeId"]  # fmt: skip
    ec2.attach_volume(VolumeId=volume, InstanceId=instance["InstanceId"], Device=DATA_DEVICE)
    return Member(host, instance["InstanceId"], volume, group)


def instance_of(ec2: Any, instance_id: str) -> dict[str, Any]:
    return ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]  # type: ignore[no-any-return]


def volume_of(ec2: Any, volume_id: str) -> dict[str, Any]:
    return ec2.describe_volumes(VolumeIds=[volume_id])["Volumes"][0]  # type: ignore[no-any-return]


def data_volume_at(ec2: Any, instance_id: str, device: str = DATA_DEVICE) -> str | None:
    for mapping in instance_of(ec2, instance_id).get("BlockDeviceMappings", []):
        if mapping["DeviceName"] == device:
            return str(mapping["Ebs"]["VolumeId"])
    return None


def allow_all(ec2: Any, acl: str, number: int, egress: bool) -> None:
    ec2.create_network_acl_entry(
        NetworkAclId=acl,
        RuleNumber=number,
        Protocol="-1",
        RuleAction="allow",
        Egress=egress,
        CidrBlock="0.0.0.0/0",
    )


@contextmanager
def own_acl(ec2: Any, subnet_id: str) -> Iterator[str]:
    """A network ACL of the subnet's own for the test, the subnet's first one back after."""
    vpc = ec2.describe_subnets(SubnetIds=[subnet_id])["Subnets"][0]["VpcId"]

    def association() -> dict[str, Any]:
        of_subnet = [{"Name": "association.subnet-id", "Values": [subnet_id]}]
        [acl] = ec2.describe_network_acls(Filters=of_subnet)["NetworkAcls"]
        return next(a for a in acl["Associations"] if a["SubnetId"] == subnet_id) | {
            "NetworkAclId": acl["NetworkAclId"]}  # fmt: skip

    before = association()
    acl = ec2.create_network_acl(VpcId=vpc)["NetworkAcl"]["NetworkAclId"]
    for egress in (False, True):  # its own rules, as the default ACL's
        allow_all(ec2, acl, 100, egress)
    ec2.replace_network_acl_association(AssociationId=before["NetworkAclAssociationId"],
                                        NetworkAclId=acl)  # fmt: skip
    try:
        yield acl
    finally:
        ec2.replace_network_acl_association(
            AssociationId=association()["NetworkAclAssociationId"],
            NetworkAclId=before["NetworkAclId"])  # fmt: skip
        ec2.delete_network_acl(NetworkAclId=acl)
