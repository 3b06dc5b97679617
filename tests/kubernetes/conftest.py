"""A real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler) for the Kubernetes tests: started once per session on free loopback ports, with
the Chaos Mesh and LitmusChaos CRDs applied and the nodes' heartbeats played; stopped at the
end."""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.kubernetes.cluster import (
    ADMIN_TOKEN,
    RESTRICTED_TOKEN,
    KubeCluster,
    api_client,
    apply_crds,
    chaos_mesh_crds,
    create_namespace,
    litmus_crds,
    start_cluster,
)
from tests.kubernetes.kubelet import NodeHeartbeat

_namespaces = itertools.count(1)


@dataclass
class Kube:
    cluster: KubeCluster
    admin: Path  # kubeconfig of a cluster admin
    restricted: Path  # kubeconfig of an identity RBAC grants nothing
    api: Any  # a kubernetes ApiClient as the admin
    heartbeat: NodeHeartbeat  # every node's kubelet heartbeat (`lose(node)` to end one)

    def namespace(self, stem: str) -> str:
        """A fresh namespace (with its default ServiceAccount)."""
        name = f"{stem}-{next(_namespaces)}"
        create_namespace(self.api, name)
        return name


@pytest.fixture(scope="session")
def kube() -> Iterator[Kube]:
    directory = Path(tempfile.mkdtemp(prefix="rsdrill-kube-"))
    cluster = start_cluster(directory)
    try:
        admin = cluster.kubeconfig("admin", ADMIN_TOKEN)
        api = api_client(admin)
        # BlockChaos is left out: tests install it where they need a cluster that has it.
        kinds = ("podchaos", "iochaos", "networkchaos", "timechaos", "stresschaos")
        apply_crds(api, chaos_mesh_crds(*kinds) + litmus_crds())
        heartbeat = NodeHeartbeat(api).start()
        restricted = cluster.kubeconfig("restricted", RESTRICTED_TOKEN)
        yield Kube(cluster, admin, restricted, api, heartbeat)
        heartbeat.stop()
        api.close()
        assert not heartbeat.errors, heartbeat.errors
    finally:
        cluster.stop()
