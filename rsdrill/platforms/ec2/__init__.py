"""`platform: ec2`: a set on EC2 instances and EBS volumes, faulted through the EC2 API or FIS.
boto3 is imported lazily, and only in this package."""

from rsdrill.platforms.base import PackagePlatform
from rsdrill.platforms.ec2.options import Ec2Fault, Ec2Platform

EC2_KINDS = ("host-kill", "host-freeze", "volume-detach", "iops-throttle", "disk-fault",
             "network-partition", "network-degrade", "cpu-starve", "memory-pressure",
             "disk-fill")  # fmt: skip

platform = PackagePlatform(
    "ec2",
    __name__,
    checks=f"{__name__}.options",
    options=Ec2Platform,
    fault_options=Ec2Fault,
    planner=f"{__name__}.options",
    actions=f"{__name__}.injectors",
    injectors=dict.fromkeys(EC2_KINDS, f"{__name__}.target:instance_fault"),
)
