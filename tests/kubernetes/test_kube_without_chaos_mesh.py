"""What rsdrill says where Chaos Mesh is missing, on a cluster of its own with no Chaos Mesh
controller: a CRD not installed (before and at injection), and an object no controller takes
(given up at `wait`, still removed by the revert)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rsdrill.platforms.base import InjectionError, TargetError
from rsdrill.platforms.kubernetes.target import KubernetesTarget, make_target
from tests.harness.injectors import pod_injector
from tests.harness.members import wait_until
from tests.kubernetes.cluster import apply_crds, chaos_mesh_crds
from tests.kubernetes.conftest import Kube, running_kube
from tests.kubernetes.support import experiment, make_node, make_pod, member, rsdrill_objects


@pytest.fixture(scope="module")
def kube() -> Iterator[Kube]:
    with running_kube(chaos_mesh_runs=False) as cluster:
        yield cluster


@dataclass
class Env:
    kube: Kube
    namespace: str

    def target(self, faults: list[dict[str, Any]], tmp: Path) -> KubernetesTarget:
        target = make_target(experiment(self.kube.admin, self.namespace, faults), tmp)
        target.members = [member(self.namespace, i) for i in range(3)]
        target.preflight()
        return target


@pytest.fixture(scope="module")
def env(kube: Kube) -> Env:
    namespace = kube.namespace("no-mesh")
    make_node(kube.api, f"{namespace}-node")
    for i in range(3):
        make_pod(kube.api, namespace, f"mongo-{i}", f"{namespace}-node")
    return Env(kube, namespace)


def test_missing_crds_are_named_before_and_at_injection(env: Env, tmp_path: Path) -> None:
    """NetworkChaos removed from the cluster (and put back); BlockChaos was never there."""
    from kubernetes import client

    ext = client.ApiextensionsV1Api(env.kube.api)
    partition = {"at": "1s", "kind": "network-partition", "duration": "5s"}
    target = env.target([partition], tmp_path)  # NetworkChaos is installed: preflight passes
    injector = pod_injector(target, target.faults[0], member(env.namespace, 0))
    ext.delete_custom_resource_definition("networkchaos.chaos-mesh.org")
    try:
        wait_until(lambda: not any(c.metadata.name == "networkchaos.chaos-mesh.org"
                                   for c in ext.list_custom_resource_definition().items),
                   10, "the NetworkChaos CRD gone")  # fmt: skip
        wait_until(lambda: "networkchaos" not in _served(env), 10, "networkchaos no longer served")
        with pytest.raises(
            InjectionError,
            match="Chaos Mesh is not installed in this cluster: NetworkChaos CRD not found",
        ):
            injector.inject()
        exp = experiment(env.kube.admin, env.namespace, [partition])
        with pytest.raises(TargetError, match="NetworkChaos CRD not found"):
            make_target(exp, tmp_path).preflight()
        always = {
            "at": "1s",
            "kind": "iops-throttle",
            "iops": 10,
            "duration": "5s",
            "kubernetes": {"block_chaos": "always"},
        }
        exp = experiment(env.kube.admin, env.namespace, [always])
        with pytest.raises(TargetError, match="BlockChaos CRD is not installed"):
            make_target(exp, tmp_path).preflight()
    finally:
        apply_crds(env.kube.api, chaos_mesh_crds("networkchaos"))
    assert rsdrill_objects(env.kube.api, env.namespace) == []


def _served(env: Env) -> set[str]:
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    try:
        listing = client.CustomObjectsApi(env.kube.api).get_api_resources(
            "chaos-mesh.org", "v1alpha1"
        )
    except ApiException:
        return set()
    return {r.name for r in listing.resources}


def test_no_controller_means_not_injected_by_the_deadline(kube: Kube, tmp_path: Path) -> None:
    """A namespace no Chaos Mesh controller watches: the status stays empty, rsdrill gives up
    at `wait` with that said, and the revert still removes the object."""
    namespace = kube.namespace("no-controller")
    make_node(kube.api, f"{namespace}-node")
    make_pod(kube.api, namespace, "mongo-0", f"{namespace}-node")
    exp = experiment(
        kube.admin,
        namespace,
        [{"at": "1s", "kind": "host-freeze", "engine": "chaos-mesh", "duration": "5s"}],
        wait="1s",
    )
    target = make_target(exp, tmp_path)
    injector = pod_injector(target, target.faults[0], member(namespace, 0))
    injector.inject()
    started = time.monotonic()
    with pytest.raises(
        InjectionError,
        match=r"not injected after 1s: its status is empty \(is "
        r"the Chaos Mesh controller running\?\)",
    ):
        injector.verify(0.5)
    assert time.monotonic() - started < 5
    assert [k for k, _ in rsdrill_objects(kube.api, namespace)] == ["PodChaos"]
    injector.revert()
    assert rsdrill_objects(kube.api, namespace) == []
