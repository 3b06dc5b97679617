"""Which pod a replica-set member is, and which node that pod runs on."""

from __future__ import annotations

from typing import Any

from rsdrill.platforms.kubernetes.client import Kube
from rsdrill.platforms.kubernetes.options import KubernetesPlatform
from rsdrill.platforms.kubernetes.resources import PodRef, pod_from_dns


class PodLookupError(Exception):
    """A member has no pod (the mapping names none, or the pod is gone)."""


class UnmappedMember(PodLookupError):
    """The mapping itself names no pod for the member (not a pod that is gone for now, as one
    being re-created is): whatever acts on it can never find one."""


class PodMap:
    """Members → pods, by the platform's explicit map, label selector or DNS names."""

    def __init__(self, kube: Kube, platform: KubernetesPlatform) -> None:
        self.kube = kube
        self.platform = platform

    def pod(self, host: str) -> PodRef:
        """The member's pod as it is now (with its node)."""
        namespace = self.platform.namespace
        if self.platform.pods is not None:
            if host not in self.platform.pods:
                raise UnmappedMember(
                    f"member {host} is not in target.kubernetes.pods "
                    f"({', '.join(self.platform.pods)})"
                )
            return self._read(PodRef(namespace, self.platform.pods[host]), host)
        if self.platform.selector is not None:
            return self._by_selector(host)
        ref = pod_from_dns(host, namespace)
        if ref is None:
            raise UnmappedMember(
                f"member {host} is an address, not a pod's DNS name: map it "
                "with target.kubernetes.pods or selector"
            )
        return self._read(ref, host)

    def _read(self, ref: PodRef, host: str) -> PodRef:
        pod = self.kube.pod(ref.namespace, ref.name)
        if pod is None:
            raise PodLookupError(
                f"member {host}: pod {ref.name} not found in namespace {ref.namespace}"
            )
        return _ref(pod)

    def _by_selector(self, host: str) -> PodRef:
        namespace, selector = self.platform.namespace, self.platform.selector
        pods = self.kube.pods(namespace, labels=selector)
        if not pods:
            raise PodLookupError(f"selector {selector} matches no pod in namespace {namespace}")
        name = host.rsplit(":", 1)[0]
        for pod in pods:
            spec, status = pod.get("spec", {}), pod.get("status", {})
            names = {pod["metadata"]["name"], status.get("podIP")}
            if spec.get("hostname") and spec.get("subdomain"):
                names.add(f"{spec['hostname']}.{spec['subdomain']}")
            if (
                name in names
                or name.split(".")[0] == pod["metadata"]["name"]
                or any(n and name.startswith(f"{n}.") for n in names)
            ):
                return _ref(pod)
        listed = ", ".join(p["metadata"]["name"] for p in pods)
        raise PodLookupError(
            f"member {host}: none of the pods matching {selector} in "
            f"namespace {namespace} is it ({listed})"
        )


def _ref(pod: dict[str, Any]) -> PodRef:
    meta, status = pod["metadata"], pod.get("status") or {}
    return PodRef(meta["namespace"], meta["name"], pod.get("spec", {}).get("nodeName"),
                  status.get("podIP"), status.get("hostIP"))  # fmt: skip


ZONE_LABEL = "topology.kubernetes.io/zone"
REGION_LABEL = "topology.kubernetes.io/region"


class NodeLabels:
    """Nodes' well-known topology labels, each node read once."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self._seen: dict[str, tuple[str | None, str | None]] = {}

    def zone_and_region(self, node: str | None) -> tuple[str | None, str | None]:
        """(zone, region) of `node` from its labels; (None, None) for a pod not scheduled yet
        or a node without them."""
        if node is None:
            return None, None
        if node not in self._seen:
            labels = ((self.kube.node(node) or {}).get("metadata") or {}).get("labels") or {}
            self._seen[node] = (labels.get(ZONE_LABEL), labels.get(REGION_LABEL))
        return self._seen[node]
