"""Before anything is injected: are the engines' CRDs installed, and may this identity make
every call the experiment's faults need? Each missing permission is named, so a run with a
too-narrow token is refused whole instead of failing halfway. The same list of permissions
makes the Role that `rsdrill schedule render` and manifests/ grant (no client needed here)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rsdrill.experiment.catalog import privileges_of
from rsdrill.experiment.schema import Fault, SelectDomain
from rsdrill.faults import COMMAND_KINDS
from rsdrill.platforms.kubernetes.options import KubernetesPlatform, engine_of, uses_node_agent
from rsdrill.platforms.kubernetes.resources import (
    BLOCK_CHAOS,
    CHAOS_ENGINE,
    CHAOS_RESULT,
    IO_CHAOS,
    NETWORK_CHAOS,
    POD_CHAOS,
    STRESS_CHAOS,
    TIME_CHAOS,
    ResourceType,
)

if TYPE_CHECKING:
    from rsdrill.platforms.kubernetes.client import Kube

_CHAOS_MESH_TYPE = {
    "host-kill": POD_CHAOS,
    "host-freeze": POD_CHAOS,
    "disk-fault": IO_CHAOS,
    "volume-detach": IO_CHAOS,
    "iops-throttle": IO_CHAOS,
    "network-partition": NETWORK_CHAOS,
    "network-degrade": NETWORK_CHAOS,
    "clock-skew": TIME_CHAOS,
    "cpu-starve": STRESS_CHAOS,
    "memory-pressure": STRESS_CHAOS,
}


@dataclass(frozen=True)
class Permission:
    """One verb on one resource, in a namespace (None: cluster-wide)."""

    verb: str
    resource: str
    group: str = ""
    namespace: str | None = None
    subresource: str = ""
    name: str = ""
    """The one object allowed (RBAC's resourceNames); empty: any."""

    def __str__(self) -> str:
        what = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        if self.group:
            what = f"{what}.{self.group}"
        if self.name:
            what = f"{what} of {self.name}"
        where = f"in namespace {self.namespace}" if self.namespace else "cluster-wide"
        return f"{self.verb} {what} {where}"


def _custom(verbs: str, rtype: ResourceType, namespace: str) -> list[Permission]:
    return [Permission(v, rtype.plural, rtype.group, namespace) for v in verbs.split()]


def rbac(privilege: str, namespace: str) -> list[Permission]:
    """The permissions a spec privilege names: `verbs resource[/subresource][.group]`, in
    `namespace` unless it ends in ` cluster-wide` (rsdrill/faults/spec.py)."""
    verbs, what, *where = privilege.split()
    resource, _, group = what.partition(".")
    resource, _, subresource = resource.partition("/")
    scope = None if where == ["cluster-wide"] else namespace
    return [Permission(verb, resource, group, scope, subresource) for verb in verbs.split(",")]


def needed_permissions(
    platform: KubernetesPlatform,
    faults: Sequence[Fault],
    *,
    block_chaos: bool,
    account: tuple[str, str] | None = None,
) -> list[Permission]:
    """Every API call the faults will make, as permissions (duplicates removed, in order): the
    pods looked up, then each fault's way's privileges from the spec; and, when a fault goes
    through the node agent, the token for it that the ServiceAccount `account` (namespace,
    name) requests for itself, and for no other account (whose rights that would be)."""
    ns = platform.namespace
    needed = [Permission("get", "pods", "", ns)]
    if platform.selector is not None:
        needed.append(Permission("list", "pods", "", ns))
    # An iops-throttle through Chaos Mesh names BlockChaos and IOChaos: it uses the one the
    # cluster has.
    unused = (IO_CHAOS if block_chaos else BLOCK_CHAOS).plural
    if any(isinstance(f.select, SelectDomain) for f in faults):
        needed.append(Permission("get", "nodes"))  # the zone of each member's pod's node
    for fault in faults:
        for privilege in privileges_of("kubernetes", fault):
            needed += [p for p in rbac(privilege, ns)
                       if fault.kind != "iops-throttle" or p.resource != unused]  # fmt: skip
    if account is not None and any(uses_node_agent(f) for f in faults):
        needed.append(Permission("create", "serviceaccounts", "", account[0], "token", account[1]))
    return list(dict.fromkeys(needed))


def missing_permissions(kube: Kube, needed: list[Permission]) -> list[Permission]:
    return [
        p
        for p in needed
        if not kube.allowed(p.verb, p.resource, p.namespace, p.group, p.subresource, p.name)
    ]


def missing_engines(kube: Kube, faults: Sequence[Fault]) -> list[str]:
    """A message per engine whose CRDs the faults need but the cluster does not serve."""
    problems = []
    engines = {engine_of(f) for f in faults if f.kind not in COMMAND_KINDS}
    if "chaos-mesh" in engines:
        served = kube.served_resources(POD_CHAOS.group, POD_CHAOS.version) or set()
        for fault in faults:
            rtype = _CHAOS_MESH_TYPE.get(fault.kind)
            if engine_of(fault) == "chaos-mesh" and rtype and rtype.plural not in served:
                problem = f"Chaos Mesh is not installed in this cluster: {rtype.kind} CRD not found"
                if problem not in problems:
                    problems.append(problem)
    if "litmus" in engines:
        served = kube.served_resources(CHAOS_ENGINE.group, CHAOS_ENGINE.version) or set()
        for rtype in (CHAOS_ENGINE, CHAOS_RESULT):
            if rtype.plural not in served:
                problems.append(
                    f"LitmusChaos is not installed in this cluster: {rtype.kind} CRD not found"
                )
    return problems


def block_chaos_available(kube: Kube) -> bool:
    served = kube.served_resources(BLOCK_CHAOS.group, BLOCK_CHAOS.version) or set()
    return BLOCK_CHAOS.plural in served
