"""`platform: kubernetes`: a replica set whose members are pods. Members come from the set's
own hello; each maps to its pod (explicit map, label selector or StatefulSet DNS names).
`setup()` checks the engines' CRDs and every permission the faults need before anything is
injected; each kind's injector is built by its factory in `injectors.py`."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

from rsdrill.domains import PlatformPlace
from rsdrill.experiment.schema import Experiment
from rsdrill.faults import COMMAND_KINDS
from rsdrill.faults.base import SelectDomain, describe_selection, reachable_hosts
from rsdrill.platforms.base import PlacesMembers, RunTarget, TargetError
from rsdrill.platforms.kubernetes.client import ClusterAccess, Kube, KubeError
from rsdrill.platforms.kubernetes.nodeagent import SERVICE_ACCOUNT_ONLY
from rsdrill.platforms.kubernetes.options import (
    KubernetesFault,
    KubernetesPlatform,
    engine_of,
    uses_node_agent,
)
from rsdrill.platforms.kubernetes.pods import NodeLabels, PodLookupError, PodMap, UnmappedMember
from rsdrill.platforms.kubernetes.preflight import (
    block_chaos_available,
    missing_engines,
    missing_permissions,
    needed_permissions,
)
from rsdrill.platforms.remote import RemoteTarget


class KubernetesTarget(RemoteTarget):
    def __init__(self, exp: Experiment, out_dir: Path) -> None:
        super().__init__(exp, out_dir)
        section = exp.target.section("kubernetes", KubernetesPlatform)
        assert section is not None  # the schema requires the section
        self.k8s = section
        self.faults = exp.faults
        self.access = ClusterAccess(self.k8s.kubeconfig, self.k8s.context, self.k8s.in_cluster)
        self._kube: Kube | None = None
        self._nodes: NodeLabels | None = None  # the nodes read for the run, each once
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
            account = None
            if any(uses_node_agent(f) for f in self.faults):
                # The agent's token is requested by and for the run's own ServiceAccount.
                account = self.kube.service_account()
                if account is None:
                    problems.append(SERVICE_ACCOUNT_ONLY.format(user=self.kube.username()))
            needed = needed_permissions(
                self.k8s, self.faults, block_chaos=self.block_chaos, account=account
            )
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
        """Every member's and router's pod is looked up now (which loads the core API before
        the first fault is due): a refusal when none has one, or when a fault that acts on
        pods may land on a host the mapping gives none (a router of `{mongos: N}` left out of
        `pods`, a member of the shard it names), naming the first such."""
        pods = PodMap(self.kube, self.k8s)
        reasons: dict[str, str] = {}
        unmapped: set[str] = set()
        for host in self.mapped_hosts:
            try:
                pods.pod(host)
            except PodLookupError as exc:
                reasons[host] = str(exc)
                if isinstance(exc, UnmappedMember):
                    unmapped.add(host)
            except KubeError as exc:
                raise TargetError(f"kubernetes: {exc}") from None
        if reasons and len(reasons) == len(self.mapped_hosts):
            return [next(iter(reasons.values()))]
        # A pod gone for now (being re-created) may be back when the fault is due; a host the
        # mapping leaves out never will be.
        for i, fault in enumerate(self.faults):
            if fault.kind in COMMAND_KINDS:
                continue
            for host in reachable_hosts(fault.select, self.members, self.layout):
                if host in unmapped:
                    return [f"faults[{i}] ({describe_selection(fault.select)}) may act on "
                            f"{host}: {reasons[host]}"]  # fmt: skip
        return []

    def platform_placements(self) -> dict[str, PlatformPlace]:
        """Each member's pod's node's zone and region (its well-known topology labels); only
        when a fault selects by domain (reading nodes needs `get nodes`, cluster-wide)."""
        if not any(isinstance(f.select, SelectDomain) for f in self.faults):
            return {}
        # Pods may move, so each is read again; a node's zone label is set when it registers.
        if self._nodes is None or self._nodes.kube is not self.kube:
            self._nodes = NodeLabels(self.kube)
        pods, nodes = PodMap(self.kube, self.k8s), self._nodes
        placed: dict[str, PlatformPlace] = {}
        try:
            for host in self.mapped_hosts:
                with contextlib.suppress(PodLookupError):
                    placed[host] = PlatformPlace(*nodes.zone_and_region(pods.pod(host).node))
        except KubeError as exc:
            raise TargetError(f"kubernetes: {exc}") from None
        return placed

    def _wants_block_chaos(self) -> bool:
        modes = {
            (f.section("kubernetes", KubernetesFault) or KubernetesFault()).block_chaos
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


def make_target(exp: Experiment, out_dir: Path) -> KubernetesTarget:
    return KubernetesTarget(exp, out_dir)


if TYPE_CHECKING:
    # The runner takes it as a RunTarget that places its members: mypy checks here that it is.
    _RUN_TARGET: type[RunTarget] = KubernetesTarget
    _PLACES: type[PlacesMembers] = KubernetesTarget
