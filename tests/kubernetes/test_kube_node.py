"""Node-level host-kill: drain through the eviction API (PodDisruptionBudgets honoured), then
delete the Node object; a budget that forbids the eviction refuses the fault and the node is
uncordoned again."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from rsdrill.platforms.base import InjectionError
from rsdrill.platforms.kubernetes.actions import REVERT_ACTIONS
from rsdrill.platforms.kubernetes.target import make_target
from tests.harness.injectors import pod_injector
from tests.kubernetes.conftest import Kube
from tests.kubernetes.kubelet import Kubelet
from tests.kubernetes.support import experiment, make_node, make_pod, member

NODE_KILL = {"at": "1s", "kind": "host-kill", "scope": "node", "duration": "5s"}


def _setup(kube: Kube, stem: str, disruptions: int) -> tuple[str, str, Any]:
    """Two pods on a node, and a PodDisruptionBudget over them that allows `disruptions` (0 to
    2) evictions at once, once the real disruption controller has computed it."""
    from kubernetes import client

    namespace = kube.namespace(stem)
    node = f"{namespace}-node"
    make_node(kube.api, node)
    make_pod(kube.api, namespace, "mongo-0", node)
    make_pod(kube.api, namespace, "mongo-1", node)
    policy = client.PolicyV1Api(kube.api)
    policy.create_namespaced_pod_disruption_budget(
        namespace,
        {
            "metadata": {"name": "mongo"},
            "spec": {
                "minAvailable": 2 - disruptions,
                "selector": {"matchLabels": {"app": "mongo"}},
            },
        },
    )
    deadline = time.monotonic() + 30
    while True:
        status = policy.read_namespaced_pod_disruption_budget("mongo", namespace).status
        if status.expected_pods == 2 and status.disruptions_allowed == disruptions:
            break
        assert time.monotonic() < deadline, f"the disruption controller wrote {status}"
        time.sleep(0.05)
    return namespace, node, client.CoreV1Api(kube.api)


def test_a_blocking_budget_refuses_the_drain_and_the_node_is_uncordoned(
    kube: Kube, tmp_path: Path
) -> None:
    namespace, node, core = _setup(kube, "pdb-block", 0)
    target = make_target(experiment(kube.admin, namespace, [NODE_KILL], wait="2s"), tmp_path)
    target.preflight()
    injector = pod_injector(target, target.faults[0], member(namespace, 0))
    action = injector.revert_action()
    assert action == {
        "action": "kubernetes.uncordon-node",
        "kubeconfig": str(kube.admin),
        "context": None,
        "in_cluster": False,
        "node": node,
    }
    started = time.monotonic()
    with pytest.raises(InjectionError, match="PodDisruptionBudget") as refused:
        injector.inject()
    assert time.monotonic() - started < 10
    assert "Cannot evict pod as it would violate the pod's disruption budget" in str(refused.value)
    assert core.read_node(node).spec.unschedulable is True  # cordoned before the evictions
    injector.revert()
    assert not core.read_node(node).spec.unschedulable
    assert {p.metadata.name for p in core.list_namespaced_pod(namespace).items} == {
        "mongo-0",
        "mongo-1",
    }
    assert REVERT_ACTIONS[action["action"]](action) == f"node {node} is schedulable already"


def test_drain_evicts_then_deletes_the_node(kube: Kube, tmp_path: Path) -> None:
    namespace, node, core = _setup(kube, "pdb-allow", 2)
    kubelet = Kubelet(kube.api, namespace).start()  # confirms the graceful deletions
    try:
        target = make_target(experiment(kube.admin, namespace, [NODE_KILL]), tmp_path)
        injector = pod_injector(target, target.faults[0], member(namespace, 0))
        action = injector.revert_action()
        injector.inject()
        assert injector.verify(5.0)
    finally:
        kubelet.stop()
    assert core.list_namespaced_pod(namespace).items == []
    assert [n for n in core.list_node().items if n.metadata.name == node] == []
    injector.revert()  # the node is gone: nothing to uncordon, and no error
    assert "is gone" in REVERT_ACTIONS[action["action"]](action)


def test_drain_only_keeps_the_node_cordoned_until_revert(kube: Kube, tmp_path: Path) -> None:
    namespace, node, core = _setup(kube, "drain-only", 2)
    fault = {**NODE_KILL, "kubernetes": {"delete_node": False, "grace_period": "0s"}}
    target = make_target(experiment(kube.admin, namespace, [fault]), tmp_path)
    injector = pod_injector(target, target.faults[0], member(namespace, 1))
    assert "keep it cordoned" in injector.describe()
    injector.inject()
    assert injector.verify(5.0)
    assert core.read_node(node).spec.unschedulable is True
    assert core.list_namespaced_pod(namespace).items == []  # grace 0: gone without a kubelet
    injector.revert()
    assert not core.read_node(node).spec.unschedulable
