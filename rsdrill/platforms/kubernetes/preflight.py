"""Before anything is injected: are the engines' CRDs installed, and may this identity make
every call the experiment's faults need? Each missing permission is named, so a run with a
too-narrow token is refused whole instead of failing halfway. The same list of permissions
makes the Role that `rsdrill schedule render` and manifests/ grant (no client needed here)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rsdrill.experiment.kinds import COMMAND_KINDS
from rsdrill.experiment.schema import Fault
from rsdrill.platforms.kubernetes.options import KubernetesFault, KubernetesPlatform, engine_of
from rsdrill.platforms.kubernetes.resources import (
    BLOCK_CHAOS,
    CHAOS_ENGINE,
    CHAOS_EXPERIMENT,
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

    def __str__(self) -> str:
        what = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        if self.group:
            what = f"{what}.{self.group}"
        where = f"in namespace {self.namespace}" if self.namespace else "cluster-wide"
        return f"{self.verb} {what} {where}"


def _custom(verbs: str, rtype: ResourceType, namespace: str) -> list[Permission]:
    return [Permission(v, rtype.plural, rtype.group, namespace) for v in verbs.split()]


def needed_permissions(
    platform: KubernetesPlatform, faults: Sequence[Fault], *, block_chaos: bool
) -> list[Permission]:
    """Every API call the faults will make, as permissions (duplicates removed, in order)."""
    ns = platform.namespace
    needed = [Permission("get", "pods", "", ns)]
    if platform.selector is not None:
        needed.append(Permission("list", "pods", "", ns))
    for fault in faults:
        if fault.kind in COMMAND_KINDS:
            continue
        engine = engine_of(fault)
        options = fault.kubernetes or KubernetesFault()
        if engine == "chaos-mesh":
            rtype = _CHAOS_MESH_TYPE[fault.kind]
            if fault.kind == "iops-throttle" and block_chaos:
                rtype = BLOCK_CHAOS
            needed += _custom("create get delete", rtype, ns)
        elif engine == "litmus":
            needed += _custom("create get patch delete", CHAOS_ENGINE, ns)
            needed += _custom("get", CHAOS_EXPERIMENT, ns) + _custom("get", CHAOS_RESULT, ns)
        elif fault.kind == "host-freeze":
            # Websocket exec is a GET (verb get) on 1.31; SPDY, and newer servers, want create.
            needed += [
                Permission("get", "pods", "", ns, "exec"),
                Permission("create", "pods", "", ns, "exec"),
            ]
        elif fault.scope == "node":
            needed += [
                Permission("get", "nodes"),
                Permission("patch", "nodes"),
                # The node's pods, in every namespace: listed, evicted, waited for.
                Permission("list", "pods"),
                Permission("get", "pods"),
                Permission("create", "pods", subresource="eviction"),
            ]
            if options.delete_node:
                needed.append(Permission("delete", "nodes"))
        else:
            needed.append(Permission("delete", "pods", "", ns))
    return list(dict.fromkeys(needed))


def missing_permissions(kube: Kube, needed: list[Permission]) -> list[Permission]:
    return [
        p
        for p in needed
        if not kube.allowed(p.verb, p.resource, p.namespace, p.group, p.subresource)
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
