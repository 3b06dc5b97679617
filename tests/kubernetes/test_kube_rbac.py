"""Permissions, against the real API server's RBAC: a token without the needed verbs is refused
before anything is created, with each missing permission named; the manifests' ServiceAccount
may make every call rsdrill makes, and nothing else."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from rsdrill.platforms.base import InjectionError, TargetError
from rsdrill.platforms.kubernetes.client import ClusterAccess, Kube
from rsdrill.platforms.kubernetes.target import make_target
from tests.harness.injectors import pod_injector
from tests.kubernetes.conftest import Kube as KubeFixture
from tests.kubernetes.controllers import ChaosObjects, LitmusOperator
from tests.kubernetes.kubelet import Kubelet
from tests.kubernetes.manifests_support import NODE_RBAC, RBAC, every_fault
from tests.kubernetes.support import (
    experiment,
    install_litmus_experiment,
    make_node,
    make_pod,
    member,
    rsdrill_objects,
    service_account_token,
)

CHAOS_MESH_KILL = {"at": "1s", "kind": "host-kill", "engine": "chaos-mesh", "duration": "5s"}


@pytest.fixture(scope="module")
def namespace(kube: KubeFixture) -> str:
    ns = kube.namespace("rbac")
    node = f"{ns}-node"
    make_node(kube.api, node)
    for i in range(3):
        make_pod(kube.api, ns, f"mongo-{i}", node)
    return ns


def test_restricted_token_is_refused_naming_every_missing_permission(
    kube: KubeFixture, namespace: str, tmp_path: Path
) -> None:
    faults = [CHAOS_MESH_KILL, {"at": "1s", "kind": "host-kill", "scope": "node", "duration": "5s"}]
    target = make_target(experiment(kube.restricted, namespace, faults), tmp_path)
    with pytest.raises(TargetError) as refused:
        target.preflight()
    message = str(refused.value)
    assert "nothing was injected" in message
    for permission in (
        f"get pods in namespace {namespace}",
        f"create podchaos.chaos-mesh.org in namespace {namespace}",
        f"delete podchaos.chaos-mesh.org in namespace {namespace}",
        "create pods/eviction cluster-wide",
        "delete nodes cluster-wide",
    ):
        assert permission in message
    assert "rsdrill-test-restricted-token" not in message
    assert rsdrill_objects(kube.api, namespace) == []


def test_a_denied_verb_at_injection_names_it_and_creates_nothing(
    kube: KubeFixture, namespace: str, tmp_path: Path
) -> None:
    from kubernetes import client

    rbac = client.RbacAuthorizationV1Api(kube.api)
    rbac.create_namespaced_role(
        namespace,
        {
            "metadata": {"name": "read-pods"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}],
        },
    )
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "read-pods"},
            "subjects": [
                {"kind": "User", "name": "restricted", "apiGroup": "rbac.authorization.k8s.io"}
            ],
            "roleRef": {
                "kind": "Role",
                "name": "read-pods",
                "apiGroup": "rbac.authorization.k8s.io",
            },
        },
    )
    target = make_target(experiment(kube.restricted, namespace, [CHAOS_MESH_KILL]), tmp_path)
    target.members = [member(namespace, i) for i in range(3)]
    injector = pod_injector(target, target.faults[0], member(namespace, 0))  # get pods is allowed
    with pytest.raises(InjectionError) as denied:
        injector.inject()
    assert 'cannot create resource "podchaos" in API group "chaos-mesh.org"' in str(denied.value)
    assert rsdrill_objects(kube.api, namespace) == []


@pytest.fixture(scope="module")
def service_account_kubeconfig(kube: KubeFixture, namespace: str) -> Iterator[Path]:
    """The manifests' rsdrill ServiceAccount and roles (rbac.yaml, moved to the test's
    namespace as an overlay's `namespace:` would), and a kubeconfig with its token."""

    from tests.kubernetes.cluster import server_side_apply

    # The game-day account with the opt-in node-level grants on top.
    docs = [d for path in (RBAC, NODE_RBAC) for d in yaml.safe_load_all(path.read_text()) if d]
    for doc in docs:
        if doc["metadata"].get("namespace"):
            doc["metadata"]["namespace"] = namespace
        for subject in doc.get("subjects", []):
            subject["namespace"] = namespace
        if doc["kind"].startswith("Cluster"):
            doc["metadata"]["name"] = f"{namespace}-rsdrill"
            if "roleRef" in doc:
                doc["roleRef"]["name"] = f"{namespace}-rsdrill"
    assert server_side_apply(kube.api, docs, namespace, dry_run=False) == []
    yield kube.account_kubeconfig(namespace, "rsdrill")


def test_manifests_rbac_allows_every_call_and_nothing_else(
    kube: KubeFixture, namespace: str, service_account_kubeconfig: Path, tmp_path: Path
) -> None:
    every = every_fault(namespace)
    exp = experiment(
        service_account_kubeconfig,
        namespace,
        [f.model_dump(mode="json", exclude_defaults=True) for f in every.faults],
        selector="app=mongo",
    )
    make_target(exp, tmp_path).preflight()  # every call allowed: no TargetError
    sa = Kube(ClusterAccess(str(service_account_kubeconfig)))
    try:
        denied = [
            (verb, resource, ns, group)
            for verb, resource, ns, group in [
                ("get", "secrets", namespace, ""),
                ("list", "secrets", namespace, ""),
                ("create", "pods", namespace, ""),
                ("patch", "pods", namespace, ""),
                ("delete", "deployments", namespace, "apps"),
                ("delete", "statefulsets", namespace, "apps"),
                ("create", "podchaos", "default", "chaos-mesh.org"),
                ("patch", "podchaos", namespace, "chaos-mesh.org"),
                ("delete", "chaosengines", "default", "litmuschaos.io"),
                ("create", "nodes", None, ""),
                ("update", "nodes", None, ""),
                ("delete", "namespaces", None, ""),
                ("delete", "pods", "default", ""),
                ("create", "customresourcedefinitions", None, "apiextensions.k8s.io"),
            ]
            if sa.allowed(verb, resource, ns, group)
        ]
        # Its own token for the node agent, and no other account's (whose rights it carries).
        tokens = {name: sa.allowed("create", "serviceaccounts", namespace, "", "token", name)
                  for name in ("rsdrill", "default")}  # fmt: skip
    finally:
        sa.close()
    assert denied == []
    assert tokens == {"rsdrill": True, "default": False}


def test_service_account_round_trip(
    kube: KubeFixture, namespace: str, service_account_kubeconfig: Path, tmp_path: Path
) -> None:
    """A Chaos Mesh fault and a node drain carried out with the ServiceAccount's token."""
    node = f"{namespace}-drain"
    make_node(kube.api, node)
    kubelet = Kubelet(kube.api, namespace)
    make_pod(kube.api, namespace, "mongo-3", node)
    mesh = ChaosObjects(kube.api, namespace)
    loops = [mesh.start(), kubelet.start()]
    try:
        faults: list[dict[str, Any]] = [
            {**CHAOS_MESH_KILL, "kind": "host-freeze"},
            {"at": "1s", "kind": "host-kill", "scope": "node", "duration": "5s"},
        ]
        exp = experiment(service_account_kubeconfig, namespace, faults)
        target = make_target(exp, tmp_path)
        target.members = [member(namespace, i) for i in range(4)]
        target.preflight()
        for fault, host in zip(
            target.faults, (member(namespace, 0), member(namespace, 3)), strict=True
        ):
            injector = pod_injector(target, fault, host)
            injector.inject()
            assert injector.verify(5.0)
            injector.revert()
        assert rsdrill_objects(kube.api, namespace) == []
        assert "mongo-3" in kubelet.stopped_at  # evicted with its node
    finally:
        for loop in loops:
            loop.stop()
    assert not mesh.errors and not kubelet.errors


def test_a_litmus_network_degrade_runs_with_the_permissions_its_way_names(
    kube: KubeFixture, namespace: str, tmp_path: Path
) -> None:
    """A Role made from `needed_permissions` (the spec's privileges for the Litmus way, what
    `rsdrill check` asks for) and nothing else: the preflight passes, and the engine is created,
    followed, stopped and deleted, and deleted again from the journal's action alone."""
    from kubernetes import client

    from rsdrill.platforms.kubernetes.actions import REVERT_ACTIONS
    from rsdrill.platforms.kubernetes.preflight import needed_permissions

    fault = {"at": "1s", "kind": "network-degrade", "engine": "litmus", "duration": "1s",
             "direction": "outbound", "between": "members", "latency": "30ms"}  # fmt: skip
    admin_exp = experiment(kube.admin, namespace, [fault])
    assert admin_exp.target.kubernetes is not None
    needed = needed_permissions(admin_exp.target.kubernetes, admin_exp.faults, block_chaos=False)
    rules: dict[tuple[str, str], list[str]] = {}
    for p in needed:
        assert p.namespace == namespace, p  # nothing cluster-wide
        what = f"{p.resource}/{p.subresource}" if p.subresource else p.resource
        rules.setdefault((p.group, what), []).append(p.verb)
    assert rules == {
        ("", "pods"): ["get"],
        ("litmuschaos.io", "chaosengines"): ["create", "get", "patch", "delete"],
        ("litmuschaos.io", "chaosexperiments"): ["get"],
        ("litmuschaos.io", "chaosresults"): ["get"],
    }
    rbac = client.RbacAuthorizationV1Api(kube.api)
    rbac.create_namespaced_role(namespace, {
        "metadata": {"name": "litmus-degrade"},
        "rules": [{"apiGroups": [g], "resources": [r], "verbs": v} for (g, r), v in rules.items()],
    })  # fmt: skip
    token = service_account_token(kube.api, namespace, "litmus-degrade")
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": "litmus-degrade"},
        "subjects": [{"kind": "ServiceAccount", "name": "litmus-degrade", "namespace": namespace}],
        "roleRef": {"kind": "Role", "name": "litmus-degrade",
                    "apiGroup": "rbac.authorization.k8s.io"},
    })  # fmt: skip
    install_litmus_experiment(kube.api, namespace, "pod-network-latency")
    operator = LitmusOperator(kube.api, namespace)
    loop = operator.start()
    try:
        kubeconfig = kube.cluster.kubeconfig(f"litmus-degrade-{namespace}", token)
        target = make_target(experiment(kubeconfig, namespace, [fault]), tmp_path)
        target.members = [member(namespace, i) for i in range(3)]
        target.preflight()  # every call allowed: no TargetError
        injector = pod_injector(target, target.faults[0], member(namespace, 0))
        action = injector.revert_action()
        injector.inject()
        assert injector.verify(5.0), injector.describe()
        injector.revert()
        assert injector.report()["litmus"]["verdict"] == "Pass"
        assert rsdrill_objects(kube.api, namespace) == []
        assert action is not None and REVERT_ACTIONS[action["action"]](action)
        target.teardown()
    finally:
        loop.stop()
    assert not operator.errors
