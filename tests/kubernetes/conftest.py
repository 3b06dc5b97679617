"""A real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler) with Chaos Mesh's real controller-manager for the Kubernetes tests: started once on
free loopback ports, with the Chaos Mesh and LitmusChaos CRDs applied and the nodes'
heartbeats played; stopped after the directory's last test."""

from __future__ import annotations

import itertools
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.kubernetes import chaos_mesh
from tests.kubernetes.bound import BoundSet, bound
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
from tests.kubernetes.controllers import LitmusOperator, told
from tests.kubernetes.kubelet import NodeHeartbeat
from tests.kubernetes.support import install_litmus_experiment, token_of

_namespaces = itertools.count(1)
HERE = Path(__file__).resolve().parent


@dataclass
class Kube:
    cluster: KubeCluster
    admin: Path  # kubeconfig of a cluster admin
    restricted: Path  # kubeconfig of an identity RBAC grants nothing
    api: Any  # a kubernetes ApiClient as the admin
    heartbeat: NodeHeartbeat  # every node's kubelet heartbeat (`lose(node)` to end one)
    chaos_mesh: subprocess.Popen[bytes] | None = None  # the real controller-manager, if it runs
    daemon: chaos_mesh.StandinDaemon | None = None  # the stand-in chaos-daemon it calls, then

    def account_kubeconfig(self, namespace: str, account: str) -> Path:
        """A kubeconfig with an hour's token of the ServiceAccount `account` (TokenRequest)."""
        return self.cluster.kubeconfig(
            f"{namespace}-{account}", token_of(self.api, namespace, account)
        )

    def namespace(self, stem: str) -> str:
        """A fresh namespace (with its default ServiceAccount)."""
        name = f"{stem}-{next(_namespaces)}"
        create_namespace(self.api, name)
        return name


@contextmanager
def running_kube(*, chaos_mesh_runs: bool = True) -> Iterator[Kube]:
    """A cluster of its own: every CRD of Chaos Mesh, its controller-manager and the stand-in
    chaos-daemon running; or, without `chaos_mesh_runs`, no Chaos Mesh controller and only the
    CRDs of the kinds rsdrill makes (BlockChaos left out, as in a cluster that has no such
    CRD); Litmus's CRDs; the nodes' heartbeats."""
    from kubernetes import client

    # Every model the client decodes copies the default configuration, or builds one, which
    # reads the proxy variables by walking os.environ: from the harness's threads that walk
    # races pytest setting PYTEST_CURRENT_TEST (a KeyError). A default makes it a copy.
    client.Configuration.set_default(client.Configuration())
    directory = Path(tempfile.mkdtemp(prefix="rsdrill-kube-"))
    cluster = start_cluster(directory)
    try:
        admin = cluster.kubeconfig("admin", ADMIN_TOKEN)
        api = api_client(admin)
        kinds = ("podchaos", "iochaos", "networkchaos", "timechaos", "stresschaos")
        mesh_crds = chaos_mesh.crds() if chaos_mesh_runs else chaos_mesh_crds(*kinds)
        apply_crds(api, mesh_crds + litmus_crds())
        heartbeat = NodeHeartbeat(api).start()
        restricted = cluster.kubeconfig("restricted", RESTRICTED_TOKEN)
        with ExitStack() as stack:
            process = daemon = None
            if chaos_mesh_runs:
                create_namespace(api, chaos_mesh.NAMESPACE)
                if chaos_mesh.can_serve_daemon():
                    daemon = stack.enter_context(chaos_mesh.standin_daemon(cluster, api))
                process = stack.enter_context(chaos_mesh.controller_manager(cluster, api, daemon))
            yield Kube(cluster, admin, restricted, api, heartbeat, process, daemon)
            assert process is None or process.poll() is None, "chaos-controller-manager exited"
        heartbeat.stop()
        api.close()
        assert not heartbeat.errors, told(heartbeat.errors)
    finally:
        cluster.stop()


class _SharedKube:
    """The cluster the directory's tests share: started by the first test that asks for it,
    stopped once the next test to run is elsewhere. tests/conftest.py has xdist hand every
    Kubernetes file to one worker, at the start, so a run starts one cluster and keeps it no
    longer than its tests (an idle control plane and Chaos Mesh cost 8% of a core)."""

    def __init__(self) -> None:
        self._stack: ExitStack | None = None
        self._kube: Kube | None = None
        self._failed: Exception | None = None  # a start that failed fails the rest at once

    def get(self) -> Kube:
        if self._failed is not None:
            raise self._failed
        if self._kube is None:
            stack = ExitStack()
            try:
                self._kube = stack.enter_context(running_kube())
            except Exception as error:
                self._failed = error
                raise
            self._stack = stack
        return self._kube

    def stop(self) -> None:
        stack, self._stack, self._kube = self._stack, None, None
        if stack is not None:
            stack.close()


_shared = _SharedKube()


@pytest.fixture(scope="module")
def kube() -> Kube:
    return _shared.get()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    # Around the item's own teardown, so a module's fixtures using the cluster are gone first;
    # and even when one of them failed (a trylast hook was skipped then: the cluster outlived
    # the run).
    try:
        return (yield)
    finally:
        if nextitem is None or HERE not in nextitem.path.parents:
            _shared.stop()


@pytest.fixture
def bound_set(
    kube: Kube, tmp_path: Path, free_port_base: Callable[[int], int], request: Any
) -> Iterator[BoundSet]:
    """tests/kubernetes/bound.py's set; the parameter, if any, its `zones` or `topology`."""
    with bound(kube, tmp_path, free_port_base(3), **getattr(request, "param", {})) as found:
        yield found


@pytest.fixture
def litmus(kube: Kube, bound_set: BoundSet) -> Iterator[LitmusOperator]:
    """The Litmus stand-in on the bound set's namespace, with pod-delete installed."""
    install_litmus_experiment(kube.api, bound_set.namespace, "pod-delete")
    operator = LitmusOperator(kube.api, bound_set.namespace)
    operator.start()
    try:
        yield operator
    finally:
        operator.stop()
    assert not operator.errors
