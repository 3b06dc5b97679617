"""The kubelet's part, played by the harness: no kubelet runs here (it needs a container runtime).

Everything a kubelet reports comes from here, and nothing else a kubelet does not do:
- `NodeHeartbeat` (one for the whole cluster): each Node reported Ready with its capacity once,
  and its Lease in kube-node-lease renewed, so the real node lifecycle controller keeps it
  Ready; a node `lose`s its heartbeat, and the real controller marks it Unknown, taints it and
  evicts its pods, as it does when a node dies (its kubelet does nothing meanwhile: nobody
  confirms those pods' deletion until the node is `restore`d).
- `Kubelet` (one per namespace): a pod bound to a node, by the real scheduler or at its
  creation, is started (`on_start(pod)`, then its status Running and Ready); a pod being
  deleted is stopped (`on_stop(pod)`) and its deletion confirmed (grace 0, what a kubelet
  does once the containers stopped); a pod deleted outright (grace 0) is stopped too. A
  container whose image is changed (Chaos Mesh's pod-failure swaps in a pause image) is
  restarted in it, as a kubelet does: its member stops, and starts again when the image is
  back.
- `ContainerRuntime`: the runtime under a kubelet, for pods whose container is a member
  process: its container status (id, running, restartCount) published as the process changes,
  and a container whose process exited started again (restartPolicy Always), counted.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from tests.kubernetes.controllers import Loop, now

LEASE_NAMESPACE = "kube-node-lease"
LEASE_DURATION_S = 40  # a kubelet's default
# A kubelet renews every 10 s, four times the controller's default grace period of 40 s; here
# eight times the test cluster's 16 s (cluster.py): room for a busy CI.
RENEW_EVERY_S = 2.0
# Enough that the scheduler's resource fit never refuses a test pod.
CAPACITY = {"cpu": "16", "memory": "64Gi", "pods": "110", "ephemeral-storage": "100Gi"}


def _micronow() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def report_ready(api: Any, node: str) -> None:
    """Write a node's status as its kubelet does on registering: Ready, no pressure, capacity."""
    from kubernetes import client

    stamp = now()
    conditions = [
        {"type": kind, "status": "False", "reason": f"KubeletHas{reason}",
         "lastHeartbeatTime": stamp, "lastTransitionTime": stamp}
        for kind, reason in (("MemoryPressure", "SufficientMemory"),
                             ("DiskPressure", "NoDiskPressure"), ("PIDPressure", "SufficientPID"))
    ]  # fmt: skip
    conditions.append({"type": "Ready", "status": "True", "reason": "KubeletReady",
                       "lastHeartbeatTime": stamp, "lastTransitionTime": stamp})  # fmt: skip
    status = {"conditions": conditions, "capacity": CAPACITY, "allocatable": CAPACITY}
    client.CoreV1Api(api).patch_node_status(node, {"status": status})


class NodeHeartbeat(Loop):
    """Keeps every Node alive but those lost: its Ready status once, its Lease renewed."""

    def __init__(self, api: Any) -> None:
        from kubernetes import client

        super().__init__("harness-node-heartbeat", interval_s=RENEW_EVERY_S)
        self.core = client.CoreV1Api(api)
        self.coordination = client.CoordinationV1Api(api)
        self._lost: set[str] = set()
        self._lock = threading.Lock()

    def lose(self, node: str) -> None:
        """The node dies: no more heartbeats (its Lease expires after 40 s), and its kubelet
        does nothing more (`Kubelet` asks `is_lost`)."""
        with self._lock:
            self._lost.add(node)

    def restore(self, node: str) -> None:
        """The node is back: its kubelet reports Ready and renews its Lease again."""
        with self._lock:
            self._lost.discard(node)
        report_ready(self.core.api_client, node)

    def is_lost(self, node: str) -> bool:
        with self._lock:
            return node in self._lost

    def tick(self) -> None:
        from kubernetes.client.rest import ApiException

        with self._lock:
            lost = set(self._lost)
        for node in self.core.list_node().items:
            name = node.metadata.name
            if name in lost:
                continue
            if not any(c.type == "Ready" for c in node.status.conditions or []):
                report_ready(self.core.api_client, name)
            try:
                self._renew(name, node.metadata.uid)
            except ApiException as exc:
                if exc.status not in (404, 409):  # the node deleted, or a renewal raced it
                    raise

    def _renew(self, node: str, uid: str) -> None:
        from kubernetes.client.rest import ApiException

        renewed = {"spec": {"renewTime": _micronow()}}
        try:
            self.coordination.patch_namespaced_lease(node, LEASE_NAMESPACE, renewed)
        except ApiException as exc:
            if exc.status != 404:
                raise
            # As a kubelet makes it: owned by its Node, so the lease goes with the node.
            lease = {
                "metadata": {"name": node, "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid}]},
                "spec": {"holderIdentity": node, "leaseDurationSeconds": LEASE_DURATION_S,
                         "renewTime": _micronow()},
            }  # fmt: skip
            self.coordination.create_namespaced_lease(LEASE_NAMESPACE, lease)


class Kubelet(Loop):
    """The kubelets of one namespace's pods (see the module's docstring); `addresses`: a pod's
    `pod_ip` and `host_ip` as `mark_running` takes them. `absences`: (pod, seconds from its
    stop to its start again), for each return."""

    def __init__(
        self,
        api: Any,
        namespace: str,
        *,
        on_start: Callable[[str], None] | None = None,
        on_stop: Callable[[str], None] | None = None,
        addresses: dict[str, dict[str, str]] | None = None,
        on_running: Callable[[str, str], None] | None = None,
        lost: Callable[[str], bool] | None = None,
    ) -> None:
        from kubernetes import client

        # Woken by a watch of the namespace's pods (a kubelet watches its pods too); the
        # interval only backs it up. Listing them every 50 ms cost a tenth of a core.
        pods = (client.CoreV1Api(api).list_namespaced_pod, namespace)
        super().__init__("harness-kubelet", interval_s=1.0, watched=pods)
        self.addresses = addresses or {}
        self.core = client.CoreV1Api(api)
        self.namespace = namespace
        self.on_start = on_start
        self.on_stop = on_stop
        self.on_running = on_running  # (pod, the id of the container it now runs)
        self.lost = lost or (lambda node: False)  # a lost node's kubelet does nothing
        self.running: dict[str, str] = {}  # pod → the uid of the pod whose container runs
        self.images: dict[str, str] = {}  # pod → the image its member runs in
        self.swapped: set[str] = set()  # pods whose container runs another image for now
        self.stopped_at: dict[str, float] = {}
        self.absences: list[tuple[str, float]] = []

    def tick(self) -> None:
        from kubernetes import client
        from kubernetes.client.rest import ApiException

        from tests.kubernetes.support import mark_running

        listed = self.core.list_namespaced_pod(self.namespace).items
        # A lost node's kubelet is gone with it: its pods are neither stopped nor started, nor
        # their deletion confirmed.
        unreached = {
            p.metadata.name for p in listed if p.spec.node_name and self.lost(p.spec.node_name)
        }
        pods = [p for p in listed if p.metadata.name not in unreached]
        going = [p for p in pods if p.metadata.deletion_timestamp]
        staying = {p.metadata.name: p for p in pods if not p.metadata.deletion_timestamp}
        # Stops first: a controller's replacement may be there already, beside the pod it
        # replaces or in its place.
        for name in [n for n in self.running if n not in staying and n not in unreached]:
            self._end(name)  # being deleted, or deleted outright
        for pod in going:
            try:
                options = client.V1DeleteOptions(
                    grace_period_seconds=0, preconditions={"uid": pod.metadata.uid}
                )
                self.core.delete_namespaced_pod(pod.metadata.name, self.namespace, body=options)
            except ApiException as exc:
                if exc.status not in (404, 409):  # gone meanwhile, or already replaced
                    raise
        for name, pod in staying.items():
            image = pod.spec.containers[0].image
            if self.running.get(name) == pod.metadata.uid:
                self._follow_image(name, image)
                continue
            self._end(name)  # another pod of that name: the old one's containers went
            if not pod.spec.node_name:
                continue  # not scheduled yet
            if pod.status.phase != "Running":  # else it was made running: adopted as it is
                if self.on_start:
                    self.on_start(name)
                container_id = f"containerd://{secrets.token_hex(32)}"
                mark_running(self.core.api_client, self.namespace, name,
                             container_id=container_id, **self.addresses.get(name, {}))  # fmt: skip
                if self.on_running:
                    self.on_running(name, container_id)
            self.running[name] = pod.metadata.uid
            self.images[name] = image
            if name in self.stopped_at:
                self.absences.append((name, time.monotonic() - self.stopped_at.pop(name)))

    def _follow_image(self, pod: str, image: str) -> None:
        """A running pod's container restarted in its new image: the member's, or not."""
        if image != self.images[pod] and pod not in self.swapped:
            self.swapped.add(pod)
            if self.on_stop:
                self.on_stop(pod)
        elif image == self.images[pod] and pod in self.swapped:
            self.swapped.discard(pod)
            if self.on_start:
                self.on_start(pod)

    def _end(self, pod: str) -> None:
        if self.running.pop(pod, None) is None:
            return
        self.stopped_at[pod] = time.monotonic()
        if pod in self.swapped:  # its member stopped with the image swap
            self.swapped.discard(pod)
        elif self.on_stop:
            self.on_stop(pod)


class ContainerRuntime(Loop):
    """Pods whose one container is a process here (`running(pod)`: its pid, None once it has
    exited): publishes each pod's container status when its process changes (a containerID
    of its own per process), and starts an exited container again (`restart(pod)`), counting
    the restart in `restartCount` as the kubelet does."""

    def __init__(
        self,
        api: Any,
        namespace: str,
        pods: list[str],
        *,
        running: Callable[[str], int | None],
        restart: Callable[[str], None],
    ) -> None:
        from kubernetes import client

        super().__init__("harness-container-runtime")
        self.core = client.CoreV1Api(api)
        self.namespace = namespace
        self.running = running
        self.restart = restart
        self.restarts = dict.fromkeys(pods, 0)
        self.published: dict[str, int] = {}  # pod → the process its status names

    def tick(self) -> None:
        from tests.kubernetes.support import mark_running

        for pod in self.restarts:
            pid = self.running(pod)
            if pid is None:
                self.restart(pod)
                self.restarts[pod] += 1
                pid = self.running(pod)
            if pid is not None and self.published.get(pod) != pid:
                mark_running(self.core.api_client, self.namespace, pod,
                             restarts=self.restarts[pod],
                             container_id=f"containerd://{pid:064x}")  # fmt: skip
                self.published[pod] = pid
