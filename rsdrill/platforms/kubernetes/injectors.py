"""Each fault kind's factory on Kubernetes (the platform's `injectors` table): the member's pod
is looked up when the fault is due, then the fault's engine decides the injector (`engines.py`):
a Chaos Mesh or LitmusChaos resource rsdrill creates and deletes, or plain API calls (native).
Which kinds each engine carries out is `options.SUPPORT`, checked when the file is loaded."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rsdrill.faults import SelectDomain
from rsdrill.layout import same_set
from rsdrill.platforms.base import InjectionError
from rsdrill.platforms.domain_members import members_in
from rsdrill.platforms.kubernetes.client import KubeError, container_limits
from rsdrill.platforms.kubernetes.engines import (
    ChaosMeshFault,
    ExecFreeze,
    LitmusFault,
    NodeAgentCap,
    NodeDrain,
    Placement,
    PodDelete,
)
from rsdrill.platforms.kubernetes.options import KubernetesFault, engine_of
from rsdrill.platforms.kubernetes.pods import PodLookupError, PodMap
from rsdrill.platforms.kubernetes.resources import (
    ContainerLimits,
    PodRef,
    chaos_mesh_resource,
    litmus_engine,
    outside_of,
    resource_name,
)
from rsdrill.platforms.partition_shapes import cut_pairs

if TYPE_CHECKING:
    from rsdrill.experiment.schema import Fault
    from rsdrill.faults import NetworkDegradeFault, NetworkPartitionFault, ZoneOutageFault
    from rsdrill.platforms.base import Injector, InjectorFactory, KindFault
    from rsdrill.platforms.kubernetes.target import KubernetesTarget


@dataclass(frozen=True)
class OnPod:
    """Where a Kubernetes fault lands: the run's target, its pods, and the fault's placement
    (the member and its pod as found when the fault is due)."""

    target: KubernetesTarget
    pods: PodMap
    at: Placement


def on_member_pod(build: Callable[[OnPod, KindFault], Injector]) -> InjectorFactory[KindFault]:
    """The factory `(target, fault, host)` that builds with `build` on the member's pod."""

    @functools.wraps(build)
    def factory(target: KubernetesTarget, fault: KindFault, host: str) -> Injector:
        pods = PodMap(target.kube, target.k8s)
        try:
            pod = pods.pod(host)
        except (PodLookupError, KubeError) as exc:
            raise InjectionError(f"kubernetes: {exc}") from None
        at = Placement(target.kube, target.k8s, fault, host, pod, target.connect_options)
        return build(OnPod(target, pods, at), fault)

    return factory


def _chaos_mesh(
    on: OnPod,
    *,
    others: list[PodRef] | None = None,
    side: list[PodRef] | None = None,
    block_chaos: bool = False,
    limits: ContainerLimits | None = None,
    external: list[str] | None = None,
    confirm: bool = False,
) -> Injector:
    """The fault as a Chaos Mesh resource; `confirm`: from MongoDB's side too (the member stops
    answering or restarts)."""
    fault, pod, host = on.at.fault, on.at.pod, on.at.host
    name = resource_name(fault.kind, pod.name)
    try:
        rtype, body = chaos_mesh_resource(fault, pod, others or [], on.target.k8s, name,
                                          block_chaos=block_chaos, side=side,
                                          limits=limits, external=external)  # fmt: skip
    except ValueError as exc:  # a StressChaos the container's limits cannot size
        raise InjectionError(
            f"{fault.kind} of {host} (pod {pod.namespace}/{pod.name}): {exc}"
        ) from None
    return ChaosMeshFault(on.at, rtype, body, confirm=confirm)


def _litmus(on: OnPod, destinations: list[str] | None = None) -> Injector:
    """The fault as a LitmusChaos ChaosEngine (`destinations`: the hosts a network-degrade is
    limited to)."""
    fault, pod = on.at.fault, on.at.pod
    name = resource_name(fault.kind, pod.name)
    body = litmus_engine(fault, pod, name, on.target.k8s.container, destinations)
    return LitmusFault(on.at, body)


def _pods_of(on: OnPod, members: Iterable[str]) -> list[PodRef]:
    """The pods of `members` that have one (a member outside the cluster, an arbiter
    elsewhere, has none)."""
    pods = []
    for member in members:
        try:
            pods.append(on.pods.pod(member))
        except PodLookupError:
            continue
        except KubeError as exc:
            raise InjectionError(f"kubernetes: {exc}") from None
    return pods


def _other_pods(on: OnPod) -> list[PodRef]:
    """The other members' pods."""
    members = same_set(on.target.members, on.target.layout, on.at.host)
    others = _pods_of(on, (m for m in members if m != on.at.host))
    if not others:
        raise InjectionError(
            f"{on.at.fault.kind} of {on.at.host}: no other member has a pod to aim it at"
        )
    return others


@on_member_pod
def host_kill(on: OnPod, fault: Fault) -> Injector:
    """Pod delete or node drain (native), Litmus pod-delete or node-drain, Chaos Mesh pod-kill."""
    engine = engine_of(fault)
    if engine == "native":
        return NodeDrain(on.at) if fault.scope == "node" else PodDelete(on.at)
    if engine == "litmus":
        return _litmus(on)
    return _chaos_mesh(on, confirm=True)


@on_member_pod
def host_freeze(on: OnPod, fault: Fault) -> Injector:
    """SIGSTOP through pods/exec (native), or Chaos Mesh pod-failure."""
    if engine_of(fault) == "native":
        return ExecFreeze(on.at)
    return _chaos_mesh(on, confirm=True)


@on_member_pod
def iops_throttle(on: OnPod, fault: Fault) -> Injector:
    """The node agent's cgroup cap (native), or Chaos Mesh BlockChaos / IOChaos latency."""
    if engine_of(fault) == "native":
        return NodeAgentCap(on.at)
    wanted = (
        fault.section("kubernetes", KubernetesFault) or KubernetesFault()
    ).block_chaos != "never"
    return _chaos_mesh(on, block_chaos=on.target.block_chaos and wanted)


@on_member_pod
def chaos_mesh_fault(on: OnPod, fault: Fault) -> Injector:
    """A kind only Chaos Mesh carries out, on the member's pod alone (disk-fault and
    volume-detach: IOChaos; clock-skew: TimeChaos)."""
    return _chaos_mesh(on)


@on_member_pod
def network_partition(on: OnPod, fault: NetworkPartitionFault) -> Injector:
    """Chaos Mesh NetworkChaos partition from the other members, or between a shape's sides."""
    others = _other_pods(on)
    if fault.shape == "one":
        return _chaos_mesh(on, others=others)
    pairs = cut_pairs(fault.shape, on.at.host,
                      same_set(on.target.members, on.target.layout, on.at.host))  # fmt: skip
    try:
        near = [on.pods.pod(m) for m in dict.fromkeys(a for a, _ in pairs)]
        far = [on.pods.pod(m) for m in dict.fromkeys(b for _, b in pairs)]
    except (PodLookupError, KubeError) as exc:
        raise InjectionError(f"kubernetes: partition shape {fault.shape}: {exc}") from None
    return _chaos_mesh(on, others=far, side=near)


@on_member_pod
def network_degrade(on: OnPod, fault: NetworkDegradeFault) -> Injector:
    """Chaos Mesh NetworkChaos netem or bandwidth (its target: the other members' pods, when
    `between: members`), or a Litmus pod-network experiment (limited to the other members'
    addresses, every other member's, in a pod or not)."""
    if engine_of(fault) == "litmus":
        if fault.between == "all":
            return _litmus(on)
        members = same_set(on.target.members, on.target.layout, on.at.host)
        others = [m for m in members if m != on.at.host]
        if not others:  # without destinations Litmus would shape everything the pod sends
            raise InjectionError(f"{fault.kind} of {on.at.host}: the set has no other member")
        return _litmus(on, others)
    return _chaos_mesh(on, others=_other_pods(on) if fault.between == "members" else None)


@on_member_pod
def stress(on: OnPod, fault: Fault) -> Injector:
    """cpu-starve, memory-pressure: Chaos Mesh StressChaos, sized from the mongod container's
    limits, read now (the stress runs under them)."""
    pod = on.at.pod
    try:
        found = on.target.kube.pod(pod.namespace, pod.name)
        if found is None:
            raise KubeError(f"pod {pod.namespace}/{pod.name} is gone", 404)
        limits = container_limits(found, on.target.k8s.container)
    except KubeError as exc:
        raise InjectionError(f"kubernetes: {exc}") from None
    return _chaos_mesh(on, limits=limits)


@on_member_pod
def disk_fill(on: OnPod, fault: Fault) -> Injector:
    """Litmus disk-fill."""
    return _litmus(on)


@on_member_pod
def zone_outage(on: OnPod, fault: ZoneOutageFault) -> Injector:
    """way kill: the member's node drained and kept cordoned (native); way isolate: a Chaos
    Mesh NetworkChaos cutting the member's pod off from every address outside the zone."""
    if fault.way == "kill":
        return NodeDrain(on.at, zone=True)
    assert isinstance(fault.select, SelectDomain)  # the kind's check
    members = same_set(on.target.members, on.target.layout, on.at.host)
    inside = members_in(on.target, fault.select, on.at.host, members)
    if on.at.pod.ip is None:
        raise InjectionError(f"zone-outage of {on.at.host}: pod {on.at.pod.namespace}/"
                             f"{on.at.pod.name} has no address yet")  # fmt: skip
    # The zone's member pods and their nodes keep their links (the kubelet's probes too).
    kept = [a for pod in _pods_of(on, inside) for a in (pod.ip, pod.host_ip) if a]
    outside = _pods_of(on, (m for m in members if m not in inside))
    return _chaos_mesh(on, others=outside, external=outside_of(kept))
