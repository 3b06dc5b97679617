"""Faults on Kubernetes: Chaos Mesh and LitmusChaos resources, or plain API calls.

The `kubernetes` client package is imported by `client.py` only, and that module only when a
run, a preflight or a revert needs the cluster: importing this package stays cheap.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rsdrill.platforms.base import TargetError


def _with_cluster(action: dict[str, Any], do: Callable[[Any], str]) -> str:
    from rsdrill.platforms.kubernetes.client import ClusterAccess, Kube, KubeError

    try:
        kube = Kube(ClusterAccess.from_action(action))
    except KubeError as exc:
        raise TargetError(f"{action['action']}: {exc}") from None
    try:
        return do(kube)
    except KubeError as exc:
        raise TargetError(f"{action['action']}: {exc}") from None
    finally:
        kube.close()


def _delete_chaos(action: dict[str, Any]) -> str:
    from rsdrill.platforms.kubernetes.engines import delete_resource

    return _with_cluster(action, lambda kube: delete_resource(kube, action))


def _uncordon_node(action: dict[str, Any]) -> str:
    from rsdrill.platforms.kubernetes.engines import uncordon

    return _with_cluster(action, lambda kube: uncordon(kube, action["node"]))


def _exec_thaw(action: dict[str, Any]) -> str:
    from rsdrill.platforms.kubernetes.freeze import run_thaw_action

    return _with_cluster(action, lambda kube: run_thaw_action(kube, action))


def _node_agent_clear(action: dict[str, Any]) -> str:
    from rsdrill.platforms.kubernetes.engines import clear_cap

    return _with_cluster(action, lambda kube: clear_cap(kube, action))


# Revert actions as the journal names them; each is idempotent and carries only non-secret
# connection details (kubeconfig path, context, namespace, resource names).
REVERT_ACTIONS: dict[str, Callable[[dict[str, Any]], str]] = {
    "kubernetes.delete-chaos": _delete_chaos,
    "kubernetes.uncordon-node": _uncordon_node,
    "kubernetes.exec-thaw": _exec_thaw,
    "kubernetes.node-agent-clear": _node_agent_clear,
}
