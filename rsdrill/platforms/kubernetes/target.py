"""`platform: kubernetes`: a replica set whose members are pods. Members come from the set's
own hello; each maps to its pod (explicit map, label selector or StatefulSet DNS names).
`setup()` checks the engines' CRDs and every permission the faults need before anything is
injected; `injector()` builds the engine's injector for one fault on one member."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rsdrill.experiment.kinds import COMMAND_KINDS
from rsdrill.experiment.schema import Experiment, Fault
from rsdrill.platforms.base import InjectionError, Injector, RunTarget, TargetError
from rsdrill.platforms.kubernetes.client import ClusterAccess, Kube, KubeError, container_limits
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
from rsdrill.platforms.kubernetes.preflight import (
    block_chaos_available,
    missing_engines,
    missing_permissions,
    needed_permissions,
)
from rsdrill.platforms.kubernetes.resources import (
    ContainerLimits,
    PodRef,
    chaos_mesh_resource,
    litmus_engine,
    resource_name,
)
from rsdrill.platforms.partition_shapes import PartitionShape, cut_pairs
from rsdrill.platforms.remote import RemoteTarget

# Faults confirmed from MongoDB's side (the member stops answering, restarts or steps down).
_CONFIRMED = ("host-kill", "host-freeze")
# Faults whose StressChaos is sized from the member container's limits.
_STRESSED = ("cpu-starve", "memory-pressure")


class KubernetesTarget(RemoteTarget):
    def __init__(self, exp: Experiment, out_dir: Path) -> None:
        super().__init__(exp, out_dir)
        assert exp.target.kubernetes is not None  # the schema requires the section
        self.k8s = exp.target.kubernetes
        self.faults = exp.faults
        self.access = ClusterAccess(self.k8s.kubeconfig, self.k8s.context, self.k8s.in_cluster)
        self._kube: Kube | None = None
        self.block_chaos = False

    @property
    def kube(self) -> Kube:
        if self._kube is None:
            try:
                self._kube = Kube(self.access)
            except KubeError as exc:
                raise TargetError(f"kubernetes: {exc}") from None
        return self._kube

    def setup(self) -> None:
        """Find the members, then the preflight."""
        super().setup()
        self.preflight()

    def preflight(self) -> None:
        """Refuse the run, before anything is injected, when an engine is not installed or a
        permission the faults need is missing (every missing one is named). A set whose only
        faults are stepdowns needs no Kubernetes call at all."""
        if all(f.kind in COMMAND_KINDS for f in self.faults):
            return
        try:
            self.block_chaos = (
                any(f.kind == "iops-throttle" and engine_of(f) == "chaos-mesh" for f in self.faults)
                and self._wants_block_chaos()
            )
            problems = missing_engines(self.kube, self.faults)
            needed = needed_permissions(self.k8s, self.faults, block_chaos=self.block_chaos)
            missing = missing_permissions(self.kube, needed)
        except KubeError as exc:
            raise TargetError(f"kubernetes: {exc}") from None
        if missing:
            problems.append(
                "RBAC denies " + "; ".join(map(str, missing)) + " (manifests/base/rsdrill/"
                "rbac.yaml has the permissions rsdrill needs)"
            )
        elif self.members:
            problems += self._unmapped_members()
        if problems:
            raise TargetError(
                "kubernetes preflight refused, nothing was injected: " + "; ".join(problems)
            )

    def _unmapped_members(self) -> list[str]:
        """Every member's pod is looked up now (which loads the core API before the first fault
        is due); a refusal when no member has one, since no fault could then be injected."""
        pods = PodMap(self.kube, self.k8s)
        reasons = []
        for member in self.members:
            try:
                pods.pod(member)
            except PodLookupError as exc:
                reasons.append(str(exc))
            except KubeError as exc:
                raise TargetError(f"kubernetes: {exc}") from None
        return reasons[:1] if len(reasons) == len(self.members) else []

    def _wants_block_chaos(self) -> bool:
        modes = {
            (f.kubernetes or KubernetesFault()).block_chaos
            for f in self.faults
            if f.kind == "iops-throttle"
        }
        if modes == {"never"}:
            return False
        available = block_chaos_available(self.kube)
        if "always" in modes and not available:
            raise KubeError(
                "block_chaos: always, but Chaos Mesh's BlockChaos CRD is not "
                "installed in this cluster"
            )
        return available

    def teardown(self) -> None:
        if self._kube is not None:
            self._kube.close()
            self._kube = None

    def injector(self, fault: Fault, host: str) -> Injector:
        pods = PodMap(self.kube, self.k8s)
        try:
            pod = pods.pod(host)
        except (PodLookupError, KubeError) as exc:
            raise InjectionError(f"kubernetes: {exc}") from None
        at = Placement(self.kube, self.k8s, fault, host, pod, self.connect_options)
        engine = engine_of(fault)
        if engine == "native" and fault.kind == "host-freeze":
            return ExecFreeze(at)
        if engine == "native" and fault.kind == "iops-throttle":
            return NodeAgentCap(at)
        if engine == "native":
            return NodeDrain(at) if fault.scope == "node" else PodDelete(at)
        name = resource_name(fault.kind, pod.name)
        if engine == "litmus":
            return LitmusFault(at, litmus_engine(fault, pod, name, self.k8s.container))
        links = fault.kind == "network-partition" or (
            fault.kind == "network-degrade" and fault.between == "members"
        )
        others = self._other_pods(pods, host) if links else []
        block = (
            fault.kind == "iops-throttle"
            and self.block_chaos
            and ((fault.kubernetes or KubernetesFault()).block_chaos != "never")
        )
        side = None
        if fault.kind == "network-partition" and fault.shape != "one":
            side, others = self._sides(pods, fault.shape, host)
        limits = self._limits(pod) if fault.kind in _STRESSED else None
        try:
            rtype, body = chaos_mesh_resource(
                fault, pod, others, self.k8s, name, block_chaos=block, side=side, limits=limits
            )
        except ValueError as exc:  # a StressChaos the container's limits cannot size
            raise InjectionError(
                f"{fault.kind} of {host} (pod {pod.namespace}/{pod.name}): {exc}"
            ) from None
        return ChaosMeshFault(at, rtype, body, confirm=fault.kind in _CONFIRMED)

    def _limits(self, pod: PodRef) -> ContainerLimits:
        """The mongod container's limits, read now: a StressChaos runs under them."""
        try:
            found = self.kube.pod(pod.namespace, pod.name)
            if found is None:
                raise KubeError(f"pod {pod.namespace}/{pod.name} is gone", 404)
            return container_limits(found, self.k8s.container)
        except KubeError as exc:
            raise InjectionError(f"kubernetes: {exc}") from None

    def _sides(
        self, pods: PodMap, shape: PartitionShape, host: str
    ) -> tuple[list[PodRef], list[PodRef]]:
        """The two sides' pods of a partition shape around `host` (halves, bridge)."""
        pairs = cut_pairs(shape, host, self.members)
        try:
            near = [pods.pod(m) for m in dict.fromkeys(a for a, _ in pairs)]
            far = [pods.pod(m) for m in dict.fromkeys(b for _, b in pairs)]
        except (PodLookupError, KubeError) as exc:
            raise InjectionError(f"kubernetes: partition shape {shape}: {exc}") from None
        return near, far

    def _other_pods(self, pods: PodMap, host: str) -> list[PodRef]:
        others = []
        for member in self.members:
            if member == host:
                continue
            try:
                others.append(pods.pod(member))
            except PodLookupError:
                continue  # a member outside the cluster (an arbiter elsewhere) has no pod
            except KubeError as exc:
                raise InjectionError(f"kubernetes: {exc}") from None
        if not others:
            raise InjectionError(
                f"network-partition of {host}: no other member has a pod to partition it from"
            )
        return others


def pod_fault(target: KubernetesTarget, fault: Fault, host: str) -> Injector:
    """The injector of `fault` on the pod (or node) of member `host`, by the fault's engine."""
    return target.injector(fault, host)


def make_target(exp: Experiment, out_dir: Path) -> KubernetesTarget:
    return KubernetesTarget(exp, out_dir)


if TYPE_CHECKING:
    # The runner takes it as a RunTarget: mypy checks here that it is one.
    _RUN_TARGET: type[RunTarget] = KubernetesTarget
