"""`platform: vsphere`: a set on VMware vSphere VMs and ESXi hosts, through pyVmomi, imported
lazily, and only in this package."""

from rsdrill.platforms.base import PackagePlatform
from rsdrill.platforms.vsphere.options import VsphereFault, VspherePlatform
from rsdrill.platforms.vsphere.ways import TITLE, WAYS

platform = PackagePlatform(
    "vsphere",
    __name__,
    checks=f"{__name__}.options",
    options=VspherePlatform,
    fault_options=VsphereFault,
    planner=f"{__name__}.options",
    actions=f"{__name__}.injectors",
    injectors={
        "host-kill": f"{__name__}.injectors:host_kill",
        "host-freeze": f"{__name__}.injectors:host_freeze",
        "volume-detach": f"{__name__}.injectors:volume_detach",
        "iops-throttle": f"{__name__}.injectors:iops_throttle",
        "network-partition": f"{__name__}.injectors:network_partition",
        "zone-outage": f"{__name__}.injectors:zone_outage",
    },
    ways=WAYS,
    title=TITLE,
    sdk=("pyVmomi", "pyVim.connect"),
)
