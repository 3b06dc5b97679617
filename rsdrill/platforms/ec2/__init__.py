"""`platform: ec2`: a set on EC2 instances and EBS volumes, faulted through the EC2 API or FIS.
boto3 is imported lazily, and only in this package."""

from rsdrill.platforms.base import PackagePlatform
from rsdrill.platforms.ec2.options import Ec2Fault, Ec2Platform
from rsdrill.platforms.ec2.ways import TITLE, WAYS

platform = PackagePlatform(
    "ec2",
    __name__,
    checks=f"{__name__}.options",
    options=Ec2Platform,
    fault_options=Ec2Fault,
    planner=f"{__name__}.options",
    actions=f"{__name__}.injectors",
    injectors={
        "host-kill": f"{__name__}.injectors:host_kill",
        "host-freeze": f"{__name__}.injectors:host_freeze",
        "volume-detach": f"{__name__}.injectors:volume_detach",
        "iops-throttle": f"{__name__}.injectors:iops_throttle",
        "disk-fault": f"{__name__}.injectors:disk_fault",
        "network-partition": f"{__name__}.injectors:network_partition",
        "network-degrade": f"{__name__}.injectors:network_degrade",
        "cpu-starve": f"{__name__}.injectors:cpu_starve",
        "memory-pressure": f"{__name__}.injectors:memory_pressure",
        "disk-fill": f"{__name__}.injectors:disk_fill",
        "zone-outage": f"{__name__}.injectors:zone_outage",
    },
    ways=WAYS,
    title=TITLE,
    sdk=("boto3",),
)
