"""What the ec2 platform does for each kind it carries out, per engine (its column of the fault
tables; the IAM actions `rsdrill plan` lists are read from here)."""

from __future__ import annotations

from typing import Any

from rsdrill.faults.spec import Way, When
from rsdrill.platforms.ec2.options import Ec2Fault, wipes_volume

TITLE = "EC2"
"""The heading of its column in the fault tables."""

_FIS = ("fis:CreateExperimentTemplate", "fis:StartExperiment", "fis:GetExperiment",
        "fis:StopExperiment", "fis:DeleteExperimentTemplate", "fis:ListExperiments",
        "fis:ListExperimentTemplates", "fis:TagResource", "iam:PassRole")  # fmt: skip
_SSM = ("ssm:SendCommand", "ssm:GetCommandInvocation", "ssm:DescribeInstanceInformation")


def _action(fault: Any) -> str:
    options: Ec2Fault = fault.section("ec2", Ec2Fault) or Ec2Fault()
    return options.action


WAYS: dict[str, tuple[Way, ...]] = {
    "host-kill": (
        Way(
            "terminate (ec2.action: terminate)",
            "one-way",
            "api",
            When("ec2.action: terminate", lambda fault: _action(fault) == "terminate"),
            ("ec2:TerminateInstances",),
        ),
        Way(
            "reboot (ec2.action: reboot)",
            engine="api",
            when=When("ec2.action: reboot", lambda fault: _action(fault) == "reboot"),
            privileges=("ec2:RebootInstances",),
        ),
        Way(
            "stop (force), started on a fresh empty volume made like the data "
            "volume, which is kept (restart.volume: wipe)",
            engine="api",
            when=When("restart.volume: wipe", wipes_volume),
            privileges=(
                "ec2:StopInstances",
                "ec2:StartInstances",
                "ec2:CreateVolume",
                "ec2:CreateTags",
                "ec2:DetachVolume",
                "ec2:AttachVolume",
            ),
        ),
        Way(
            "stop (force), started on revert",
            engine="api",
            privileges=("ec2:StopInstances", "ec2:StartInstances"),
        ),
        Way(
            "FIS aws:ec2:stop-instances",
            engine="fis",
            privileges=(*_FIS, "ec2:StartInstances"),
        ),
    ),
    "host-freeze": (
        Way(
            "SIGSTOP of mongod via SSM Run Command, SIGCONT on revert",
            engine="ssm",
            privileges=_SSM,
        ),
    ),
    "cpu-starve": (
        Way(
            "FIS aws:ssm:send-command of AWSFIS-Run-CPU-Stress: stress-ng at full "
            "load, ceil(1/cpu_share) - 1 workers per vCPU of the instance type: a "
            "neighbour's load the scheduler shares with mongod, not a quota",
            "approximate",
            "fis",
            # The instance type's vCPUs size the stress.
            privileges=(*_FIS, "ec2:DescribeInstanceTypes"),
        ),
    ),
    "memory-pressure": (
        Way(
            "FIS aws:ssm:send-command of AWSFIS-Run-Memory-Stress: stress-ng takes "
            "the instance type's memory less `memory_limit_mb`, as a Percent of it: "
            "a neighbour's allocation, which the OOM killer may take instead of mongod",
            "approximate",
            "fis",
            # The instance type's memory sizes the stress.
            privileges=(*_FIS, "ec2:DescribeInstanceTypes"),
        ),
    ),
    "disk-fill": (
        Way(
            "FIS aws:ssm:send-command of AWSFIS-Run-Disk-Fill: the instance's root "
            "volume filled to `fill_percent` (Percent), not the data volume unless "
            "the dbpath is on it",
            "approximate",
            "fis",
            privileges=_FIS,
        ),
    ),
    "disk-fault": (
        Way("FIS aws:ebs:volume-io-latency: latency only", engine="fis", privileges=_FIS),
    ),
    "iops-throttle": (
        Way(
            "cgroup io.max of mongod on its data disk via SSM Run Command (reads "
            "and writes capped separately), lifted on revert",
            engine="ssm",
            privileges=_SSM,
        ),
        Way(
            "modify_volume IOPS/throughput: AWS allows the restore only 6 h after "
            "(engine ssm, the default, caps exactly)",
            "one-way",
            "api",
            privileges=("ec2:ModifyVolume", "ec2:DescribeVolumesModifications"),
        ),
        Way(
            "FIS aws:ebs:volume-io-latency: a latency per operation, not a cap",
            "approximate",
            "fis",
            privileges=_FIS,
        ),
    ),
    "volume-detach": (
        Way(
            "force-detach, re-attached on revert",
            engine="api",
            privileges=("ec2:DetachVolume", "ec2:AttachVolume"),
        ),
        Way("FIS aws:ebs:pause-volume-io", engine="fis", privileges=_FIS),
    ),
    "network-partition": (
        Way(
            "network ACL entries deny its address on the other members' subnets: "
            "established connections are cut too (isolate_from members)",
            engine="api",
            when=When("isolate_from: members", lambda fault: fault.isolate_from == "members"),
            privileges=(
                "ec2:DescribeNetworkAcls",
                "ec2:CreateNetworkAclEntry",
                "ec2:DeleteNetworkAclEntry",
            ),
        ),
        Way(
            "security groups swapped for a deny-all group: connections AWS already "
            "tracks go on (isolate_from all)",
            "approximate",
            "api",
            privileges=(
                "ec2:CreateSecurityGroup",
                "ec2:CreateTags",
                "ec2:RevokeSecurityGroupEgress",
                "ec2:ModifyInstanceAttribute",
                "ec2:DescribeSecurityGroups",
                "ec2:DeleteSecurityGroup",
            ),
        ),
    ),
    "zone-outage": (
        Way(
            "way isolate: the network ACL of each member's subnet lets through only the "
            "traffic of the zone's subnets (allow their CIDRs, deny 0.0.0.0/0, before its own "
            "rules): established connections are cut too; refused when that ACL also guards a "
            "subnet outside the zone",
            engine="api",
            when=When("way: isolate", lambda fault: fault.way == "isolate"),
            privileges=(
                "ec2:DescribeNetworkAcls",
                "ec2:DescribeSubnets",
                "ec2:CreateNetworkAclEntry",
                "ec2:DeleteNetworkAclEntry",
            ),
        ),
        Way(
            "way kill: every instance in the Availability Zone (the zone a member's instance "
            "is in, whatever its tags say) stopped (force) at once, started on revert",
            engine="api",
            when=When("way: kill", lambda fault: fault.way == "kill"),
            privileges=("ec2:StopInstances", "ec2:StartInstances"),
        ),
    ),
    "network-degrade": (
        Way(
            "FIS aws:ssm:send-command of AWSFIS-Run-Network-Latency or "
            "-Packet-Loss (outbound, latency or loss; no reorder: the documents "
            "have none)",
            engine="fis",
            privileges=_FIS,
        ),
    ),
}
"""Each kind → its ways, an engine's first way its default and the first way's engine the
default engine (`options.engine_of`); `injectors` has their factories."""
