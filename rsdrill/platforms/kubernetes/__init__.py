"""`platform: kubernetes`: a set in pods, faulted through Chaos Mesh, LitmusChaos or plain API
calls. The `kubernetes` client package is imported by `client.py` only, and that module only
when a run, a preflight or a revert needs the cluster: importing this package stays cheap."""

from rsdrill.platforms.base import PackagePlatform
from rsdrill.platforms.kubernetes.options import KubernetesFault, KubernetesPlatform
from rsdrill.platforms.kubernetes.ways import TITLE, WAYS

platform = PackagePlatform(
    "kubernetes",
    __name__,
    checks=f"{__name__}.options",
    options=KubernetesPlatform,
    fault_options=KubernetesFault,
    planner=f"{__name__}.resources",
    actions=f"{__name__}.actions",
    # Each factory picks the fault's engine (options.SUPPORT: which engine can do which kind).
    injectors={
        "host-kill": f"{__name__}.injectors:host_kill",
        "host-freeze": f"{__name__}.injectors:host_freeze",
        "disk-fault": f"{__name__}.injectors:chaos_mesh_fault",
        "volume-detach": f"{__name__}.injectors:chaos_mesh_fault",
        "iops-throttle": f"{__name__}.injectors:iops_throttle",
        "network-partition": f"{__name__}.injectors:network_partition",
        "network-degrade": f"{__name__}.injectors:network_degrade",
        "clock-skew": f"{__name__}.injectors:chaos_mesh_fault",
        "cpu-starve": f"{__name__}.injectors:stress",
        "memory-pressure": f"{__name__}.injectors:stress",
        "disk-fill": f"{__name__}.injectors:disk_fill",
        "zone-outage": f"{__name__}.injectors:zone_outage",
    },
    ways=WAYS,
    title=TITLE,
    sdk=("kubernetes.client",),
)
