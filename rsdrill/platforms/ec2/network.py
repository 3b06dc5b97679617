"""network-partition on EC2: swap the instance's security groups for a deny-all group made for
the run, then restore the original groups and delete that group.

A security group only allows: the deny-all group has no inbound rule (and, for direction both,
no outbound rule either). New connections are refused at once, and so are flows AWS does not
track; connections AWS already tracks keep flowing until they stay idle past the interface's
established-TCP timeout (see docs/platforms/ec2.md).
"""

from __future__ import annotations

import secrets
from typing import Any

from rsdrill.platforms.base import InjectionError
from rsdrill.platforms.ec2.client import Aws, AwsError
from rsdrill.platforms.ec2.lookup import Instance, describe_instance

_ALL_TRAFFIC = {"IpProtocol": "-1", "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}


class SecurityGroupPartition:
    kind = "network-partition"

    def __init__(self, aws: Aws, instance: Instance, *, outbound_too: bool) -> None:
        if instance.network_interfaces > 1:
            raise InjectionError(f"network-partition: {instance.id} ({instance.member}) has "
                                 f"{instance.network_interfaces} network interfaces; the swap "
                                 "handles single-interface instances only")  # fmt: skip
        if not instance.security_groups or instance.vpc_id is None:
            raise InjectionError(f"network-partition: {instance.id} ({instance.member}) is in "
                                 "no VPC security group to swap")  # fmt: skip
        self.aws = aws
        self.instance = instance
        self.target = instance.member
        self.outbound_too = outbound_too
        self.group_name = f"rsdrill-deny-{instance.id}-{secrets.token_hex(4)}"

    def describe(self) -> str:
        what = "inbound and outbound" if self.outbound_too else "inbound"
        return (f"swap the security groups of {self.instance.id} ({self.target}) "
                f"({', '.join(self.instance.security_groups)}) for {self.group_name}, denying "
                f"all {what} traffic (connections AWS already tracks may go on); later restore "
                "them and delete it")  # fmt: skip

    def revert_action(self) -> dict[str, Any]:
        return {"action": "ec2.restore-security-groups", **self.aws.conn.to_action(),
                "instance_id": self.instance.id, "groups": list(self.instance.security_groups),
                "deny_group_name": self.group_name, "vpc_id": self.instance.vpc_id}  # fmt: skip

    def inject(self) -> None:
        group = self.aws.ec2(
            "create_security_group",
            GroupName=self.group_name,
            Description=f"rsdrill network-partition of {self.target}: denies all traffic",
            VpcId=self.instance.vpc_id,
            TagSpecifications=[{"ResourceType": "security-group",
                                "Tags": [{"Key": "rsdrill:partition", "Value": self.target}]}],
        )["GroupId"]  # fmt: skip
        if self.outbound_too:
            # A new group allows all outbound traffic until that rule is revoked.
            self.aws.ec2("revoke_security_group_egress", GroupId=group,
                         IpPermissions=[_ALL_TRAFFIC])  # fmt: skip
        self.aws.ec2("modify_instance_attribute", InstanceId=self.instance.id, Groups=[group])

    def verify(self, timeout_s: float) -> bool:
        def check() -> tuple[bool, str]:
            groups = describe_instance(self.aws, self.instance.id).security_groups
            return len(groups) == 1 and _group_name(self.aws, groups[0]) == self.group_name, \
                ",".join(groups)  # fmt: skip

        return self.aws.poll(f"{self.instance.id} in {self.group_name}", check, timeout_s)

    def revert(self) -> None:
        restore_security_groups(self.aws, self.revert_action())


def _group_name(aws: Aws, group_id: str) -> str:
    groups = aws.ec2("describe_security_groups", GroupIds=[group_id])["SecurityGroups"]
    return str(groups[0]["GroupName"]) if groups else ""


def _deny_group(aws: Aws, name: str, vpc_id: str) -> str | None:
    groups = aws.ec2("describe_security_groups", Filters=[
        {"Name": "group-name", "Values": [name]}, {"Name": "vpc-id", "Values": [vpc_id]},
    ])["SecurityGroups"]  # fmt: skip
    return str(groups[0]["GroupId"]) if groups else None


def restore_security_groups(aws: Aws, action: dict[str, Any]) -> str:
    """Give the instance its original groups back and delete the deny-all group.
    Repeatable: groups already restored and the group already gone, nothing is done."""
    instance_id, original = action["instance_id"], list(action["groups"])
    done = []
    current = list(describe_instance(aws, instance_id).security_groups)
    if sorted(current) != sorted(original):
        aws.ec2("modify_instance_attribute", InstanceId=instance_id, Groups=original)
        done.append(f"{instance_id} back in {', '.join(original)}")
    else:
        done.append(f"{instance_id} already in {', '.join(original)}")
    group = _deny_group(aws, action["deny_group_name"], action["vpc_id"])
    if group is not None:
        # The group cannot be deleted while a network interface still uses it.
        def deleted() -> tuple[bool, str]:
            try:
                aws.ec2("delete_security_group", GroupId=group)
            except AwsError as exc:
                if exc.code == "InvalidGroup.NotFound":
                    return True, "gone"
                if exc.code == "DependencyViolation":
                    return False, "still in use"
                raise
            return True, "deleted"

        aws.wait(f"{group} deleted", deleted)
        done.append(f"deleted {action['deny_group_name']} ({group})")
    return "; ".join(done)
