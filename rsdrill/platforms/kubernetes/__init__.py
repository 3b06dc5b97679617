"""`platform: kubernetes`: a set in pods, faulted through Chaos Mesh, LitmusChaos or plain API
calls. The `kubernetes` client package is imported by `client.py` only, and that module only
when a run, a preflight or a revert needs the cluster: importing this package stays cheap."""

from rsdrill.platforms.base import PackagePlatform
from rsdrill.platforms.kubernetes.options import SUPPORT, KubernetesFault, KubernetesPlatform

platform = PackagePlatform(
    "kubernetes",
    __name__,
    checks=f"{__name__}.options",
    options=KubernetesPlatform,
    fault_options=KubernetesFault,
    planner=f"{__name__}.resources",
    actions=f"{__name__}.actions",
    # An engine's resource carries every kind out (see options.SUPPORT for which engine can).
    injectors=dict.fromkeys(SUPPORT, f"{__name__}.target:pod_fault"),
)
