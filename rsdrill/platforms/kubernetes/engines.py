"""Injectors for Kubernetes: one fault on one member's pod (or node), by one engine.

- `ChaosMeshFault`: creates a Chaos Mesh object, waits for its status to report the fault
  injected, and reverts by deleting it and waiting until it is gone (Chaos Mesh's finalizer
  runs only once the fault is recovered).
- `LitmusFault`: creates a ChaosEngine, follows it, reads the ChaosResult's verdict and probe
  success at revert, then deletes the engine.
- `ExecFreeze`: host-freeze, engine native: SIGSTOP of the member's mongod in its pod through
  pods/exec, SIGCONT on revert (see `freeze.py`).
- `NodeAgentCap`: iops-throttle, engine native: the node agent caps the member's container's
  cgroup I/O on its data volume (`nodeagent.py`, `iocap.py`) and restores it on revert.
- `PodDelete`, `NodeDrain`: plain API calls (pod delete with a grace period; cordon, evictions
  that honour PodDisruptionBudgets, and the Node object's deletion).

Before the fault's clock is trusted, MongoDB's side confirms it where it can: the member stops
answering, restarts (a new process id in its hello) or stops being primary.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rsdrill.connection import ConnectOptions, DirectConnection, WireClientError
from rsdrill.experiment.schema import Fault
from rsdrill.platforms.base import InjectionError
from rsdrill.platforms.kubernetes.client import ClusterAccess, Kube, KubeError
from rsdrill.platforms.kubernetes.freeze import (
    PROCESS,
    ExecChannel,
    freeze,
    freeze_error,
    stopped,
    thaw,
    thaw_action,
)
from rsdrill.platforms.kubernetes.nodeagent import AgentError, agent_token, call
from rsdrill.platforms.kubernetes.options import KubernetesFault, KubernetesPlatform
from rsdrill.platforms.kubernetes.resources import (
    CHAOS_ENGINE,
    CHAOS_EXPERIMENT,
    CHAOS_RESULT,
    MIB,
    PodRef,
    ResourceType,
    chaos_summary,
    litmus_experiment_name,
    litmus_result_name,
)

POLL_S = 0.2
HELLO_TIMEOUT_S = 0.5


def kube_errors(what: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Turn KubeError into InjectionError prefixed with what was being done."""

    def wrap(method: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return method(self, *args, **kwargs)
            except KubeError as exc:
                raise InjectionError(f"{what} {self.target}: {exc}") from None

        wrapped.__name__ = method.__name__
        wrapped.__doc__ = method.__doc__
        return wrapped

    return wrap


class MemberWatch:
    """MongoDB's side of a fault: did the member go away, restart or lose its primacy?"""

    def __init__(self, host: str, options: ConnectOptions) -> None:
        self.host = host
        self.options = options
        self.before: tuple[object, bool] | None = None

    def _hello(self) -> tuple[object, bool] | None:
        conn = DirectConnection(self.host, HELLO_TIMEOUT_S, self.options)
        try:
            hello = conn.hello()
        except WireClientError:
            return None
        finally:
            conn.close()
        process = (hello.get("topologyVersion") or {}).get("processId")
        return process, bool(hello.get("isWritablePrimary"))

    def start(self) -> None:
        self.before = self._hello()

    def landed(self) -> bool:
        now = self._hello()
        if now is None or self.before is None:
            return True
        restarted = now[0] is not None and now[0] != self.before[0]
        return restarted or (self.before[1] and not now[1])

    def wait_landed(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while not self.landed():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True


@dataclass(frozen=True)
class Placement:
    """Where one fault lands: the cluster, the fault, the member and the member's pod."""

    kube: Kube
    platform: KubernetesPlatform
    fault: Fault
    host: str
    pod: PodRef
    # How rsdrill's own connections reach the member (the target's `connect_options`).
    connect_options: ConnectOptions


class KubeFault:
    """What every Kubernetes injector shares: the member, its pod, the client and deadlines."""

    def __init__(self, at: Placement, *, confirm: bool) -> None:
        self.kube = at.kube
        self.platform = at.platform
        self.fault = at.fault
        self.options = at.fault.section("kubernetes", KubernetesFault) or KubernetesFault()
        self.kind = at.fault.kind
        self.target = at.host
        self.pod = at.pod
        self.watch = MemberWatch(at.host, at.connect_options) if confirm else None

    def _access(self) -> dict[str, Any]:
        return self.kube.access.as_action()

    def _deadline(self, timeout_s: float) -> float:
        return time.monotonic() + max(timeout_s, self.platform.wait)

    def _confirm(self, timeout_s: float) -> bool:
        return self.watch is None or self.watch.wait_landed(timeout_s)

    def report(self) -> dict[str, Any]:
        """What the engine said about the fault, for the run's fault record."""
        return {}


class ChaosMeshFault(KubeFault):
    def __init__(
        self, at: Placement, rtype: ResourceType, body: dict[str, Any], *, confirm: bool
    ) -> None:
        super().__init__(at, confirm=confirm)
        self.rtype = rtype
        self.body = body
        self.name = body["metadata"]["name"]

    def describe(self) -> str:
        return (
            f"Chaos Mesh {self.rtype.kind} {self.pod.namespace}/{self.name} "
            f"({chaos_summary(self.body)}) on pod {self.pod.name}"
        )

    def revert_action(self) -> dict[str, Any]:
        return delete_action(
            self.kube.access, self.rtype, self.pod.namespace, self.name, self.platform.wait
        )

    @kube_errors("Chaos Mesh: creating the fault on")
    def inject(self) -> None:
        if self.watch:
            self.watch.start()
        try:
            self.kube.create(self.rtype, self.pod.namespace, self.body)
        except KubeError as exc:
            if exc.status == 404:
                raise KubeError(
                    f"Chaos Mesh is not installed in this cluster: {self.rtype.kind} CRD not found"
                ) from None
            raise

    @kube_errors("Chaos Mesh: waiting for the fault on")
    def verify(self, timeout_s: float) -> bool:
        deadline = self._deadline(timeout_s)
        while True:
            found = self.kube.get(self.rtype, self.pod.namespace, self.name)
            if found is None:
                raise InjectionError(f"{self.describe()} disappeared before it was injected")
            state, detail = chaos_mesh_state(found)
            if state == "unselected":  # for now, or for good: Chaos Mesh's Events tell
                meta = found["metadata"]
                failed = self.kube.event_messages(self.pod.namespace, meta["uid"], "Failed")
                state, detail = chaos_mesh_state(found, failed)
            if state == "injected":
                return self._confirm(timeout_s)
            if state == "not-selected":
                raise InjectionError(
                    f"{self.describe()}: Chaos Mesh selected no pod "
                    f"({detail or 'the pod is gone?'})"
                )
            if time.monotonic() >= deadline:
                why = (
                    f": {detail}"
                    if detail
                    else (": its status is empty (is the Chaos Mesh controller running?)")
                )
                raise InjectionError(
                    f"{self.describe()} not injected after "
                    f"{max(timeout_s, self.platform.wait):g}s{why}"
                )
            time.sleep(POLL_S)

    @kube_errors("Chaos Mesh: reverting the fault on")
    def revert(self) -> None:
        self.kube.delete(self.rtype, self.pod.namespace, self.name)
        self.kube.wait_gone(self.rtype, self.pod.namespace, self.name, self.platform.wait)


SELECT_FAILED = "Failed to select targets: "
"""How Chaos Mesh's Events begin when it selected no pod (its recorder's `Failed` message)."""


def chaos_mesh_state(resource: dict[str, Any], failures: Sequence[str] = ()) -> tuple[str, str]:
    """(injected | unselected | not-selected | pending, the latest failure Chaos Mesh recorded).

    Chaos Mesh's condition controller writes `Selected: False` whenever the object has no
    records yet, before its records controller has selected too: that alone is `unselected`,
    maybe for now. It says it selected nothing only in a `Failed` Event on the object
    (`failures`: those Events' messages), which makes it `not-selected`.
    """
    status = resource.get("status") or {}
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    records = (status.get("experiment") or {}).get("containerRecords") or []
    recorded = [
        e.get("message", "")
        for r in records
        for e in r.get("events") or []
        if e.get("type") == "Failed"
    ]
    detail = recorded[-1] if recorded else ""
    if (
        conditions.get("AllInjected") == "True"
        and records
        and all(r.get("phase") == "Injected" for r in records)
    ):
        return "injected", detail
    if conditions.get("Selected") == "False" and not records:
        selection = [m.removeprefix(SELECT_FAILED) for m in failures if m.startswith(SELECT_FAILED)]
        if selection:
            return "not-selected", selection[-1]
        return "unselected", detail
    return "pending", detail


class LitmusFault(KubeFault):
    def __init__(self, at: Placement, body: dict[str, Any]) -> None:
        super().__init__(at, confirm=at.fault.kind == "host-kill")
        self.body = body
        self.name = body["metadata"]["name"]
        self.experiment = litmus_experiment_name(at.fault)
        self.result_name = litmus_result_name(self.name, self.experiment)
        self.outcome: dict[str, Any] = {}

    def describe(self) -> str:
        where = f"node {self.pod.node}" if self.fault.scope == "node" else f"pod {self.pod.name}"
        return (
            f"LitmusChaos ChaosEngine {self.pod.namespace}/{self.name} "
            f"({self.experiment}) on {where}"
        )

    def revert_action(self) -> dict[str, Any]:
        return delete_action(
            self.kube.access, CHAOS_ENGINE, self.pod.namespace, self.name, self.platform.wait
        )

    @kube_errors("LitmusChaos: starting the experiment on")
    def inject(self) -> None:
        if self.kube.served_resources(CHAOS_ENGINE.group, CHAOS_ENGINE.version) is None:
            raise InjectionError(
                "LitmusChaos is not installed in this cluster: ChaosEngine CRD not found"
            )
        if self.kube.get(CHAOS_EXPERIMENT, self.pod.namespace, self.experiment) is None:
            raise InjectionError(
                f"LitmusChaos experiment {self.experiment} is not installed in "
                f"namespace {self.pod.namespace} (install it from the "
                "ChaosHub)"
            )
        if self.watch:
            self.watch.start()
        self.kube.create(CHAOS_ENGINE, self.pod.namespace, self.body)

    @kube_errors("LitmusChaos: following the experiment on")
    def verify(self, timeout_s: float) -> bool:
        deadline = self._deadline(timeout_s)
        while True:
            engine = self.kube.get(CHAOS_ENGINE, self.pod.namespace, self.name)
            if engine is None:
                raise InjectionError(f"{self.describe()} disappeared before it ran")
            runs = (engine.get("status") or {}).get("experiments") or []
            status = runs[0].get("status", "") if runs else ""
            if status in ("Running", "Completed"):
                return self._confirm(timeout_s)
            if status in ("ChaosExperiment Not Found", "Forcefully Aborted", "Skipped"):
                raise InjectionError(f"{self.describe()}: Litmus reports {status}")
            if time.monotonic() >= deadline:
                raise InjectionError(
                    f"{self.describe()} not running after "
                    f"{max(timeout_s, self.platform.wait):g}s (engine status "
                    f"{status or 'empty: is the Litmus operator running?'})"
                )
            time.sleep(POLL_S)

    @kube_errors("LitmusChaos: ending the experiment on")
    def revert(self) -> None:
        ns = self.pod.namespace
        deadline = time.monotonic() + self.platform.wait
        result = self.kube.get(CHAOS_RESULT, ns, self.result_name)
        while _result_phase(result) not in ("Completed", "Stopped") and (
            time.monotonic() < deadline
        ):
            time.sleep(POLL_S)
            result = self.kube.get(CHAOS_RESULT, ns, self.result_name)
        if _result_phase(result) not in ("Completed", "Stopped"):
            # Still running past its duration: stop it, as `engineState: stop` does.
            self.kube.patch(CHAOS_ENGINE, ns, self.name, {"spec": {"engineState": "stop"}})
        self.outcome = litmus_outcome(result, self.result_name)
        self.kube.delete(CHAOS_ENGINE, ns, self.name)
        self.kube.wait_gone(CHAOS_ENGINE, ns, self.name, self.platform.wait)

    def report(self) -> dict[str, Any]:
        return {"litmus": self.outcome} if self.outcome else {}


def _result_phase(result: dict[str, Any] | None) -> str:
    return str(((result or {}).get("status") or {}).get("experimentStatus", {}).get("phase", ""))


def litmus_outcome(result: dict[str, Any] | None, name: str) -> dict[str, Any]:
    """The ChaosResult's verdict and probes, as the run's fault record keeps them."""
    if result is None:
        return {"result": name, "verdict": None, "note": "no ChaosResult was written"}
    status = result.get("status") or {}
    experiment = status.get("experimentStatus") or {}
    percentage = experiment.get("probeSuccessPercentage")
    try:
        success = float(percentage) if percentage not in (None, "") else None
    except ValueError:
        success = None
    return {
        "result": name,
        "phase": experiment.get("phase"),
        "verdict": experiment.get("verdict"),
        "probe_success_percentage": success,
        "failed_step": (experiment.get("failureOutput") or {}).get("failedStep"),
        "probes": [
            {
                "name": p.get("name"),
                "type": p.get("type"),
                "mode": p.get("mode"),
                "verdict": (p.get("status") or {}).get("verdict"),
            }
            for p in status.get("probeStatuses") or []
        ],
    }


class PodDelete(KubeFault):
    """host-kill, engine native: delete the member's pod; its StatefulSet re-creates it."""

    def __init__(self, at: Placement) -> None:
        super().__init__(at, confirm=True)
        self.grace_s = math.ceil(self.options.grace_period)
        self.uid: str | None = None

    def describe(self) -> str:
        return f"delete pod {self.pod.namespace}/{self.pod.name} (grace {self.grace_s}s)"

    def revert_action(self) -> None:
        return None  # the StatefulSet brings the pod back; nothing is left to undo

    @kube_errors("deleting the pod of")
    def inject(self) -> None:
        assert self.watch is not None
        self.watch.start()
        pod = self.kube.pod(self.pod.namespace, self.pod.name)
        if pod is None:
            raise InjectionError(
                f"pod {self.pod.namespace}/{self.pod.name} of {self.target} is gone already"
            )
        self.uid = pod["metadata"]["uid"]
        self.kube.delete_pod(self.pod.namespace, self.pod.name, self.grace_s)

    @kube_errors("waiting for the pod deletion of")
    def verify(self, timeout_s: float) -> bool:
        deadline = self._deadline(timeout_s)
        while True:
            pod = self.kube.pod(self.pod.namespace, self.pod.name)
            if (
                pod is None
                or pod["metadata"]["uid"] != self.uid
                or (pod["metadata"].get("deletionTimestamp"))
            ):
                return self._confirm(timeout_s)
            if time.monotonic() >= deadline:
                return False
            time.sleep(POLL_S)

    def revert(self) -> None:
        return None


class ExecFreeze(KubeFault):
    """host-freeze, engine native: the member's mongod stopped (SIGSTOP) inside its container
    through pods/exec, resumed (SIGCONT) on revert: the same process, PID and sockets after."""

    def __init__(self, at: Placement, channel: ExecChannel | None = None) -> None:
        super().__init__(at, confirm=True)
        self.channel: ExecChannel = channel or at.kube
        self.container = at.platform.container
        self.pids: list[int] = []

    def describe(self) -> str:
        return (
            f"SIGSTOP {PROCESS} in pod {self.pod.namespace}/{self.pod.name} (container "
            f"{self.container}) through pods/exec; SIGCONT on revert"
        )

    def revert_action(self) -> dict[str, Any]:
        return thaw_action(self.kube.access, self.pod, self.container)

    def inject(self) -> None:
        if self.watch:
            self.watch.start()
        try:
            self.pids = freeze(self.channel, self.pod, self.container)
        except KubeError as exc:
            raise freeze_error(self.pod, exc) from None

    def verify(self, timeout_s: float) -> bool:
        try:
            held = stopped(self.channel, self.pod, self.container, self.pids, timeout_s)
        except KubeError as exc:
            raise freeze_error(self.pod, exc) from None
        return held and self._confirm(timeout_s)

    def revert(self) -> None:
        try:
            thaw(self.channel, self.pod, self.container)
        except KubeError as exc:
            raise InjectionError(
                f"resuming {PROCESS} in pod {self.pod.namespace}/{self.pod.name}: {exc}"
            ) from None

    def report(self) -> dict[str, Any]:
        return {"frozen_pids": self.pids}


class NodeAgentCap(KubeFault):
    """iops-throttle, engine native: a true IOPS / bandwidth cap, set by the node agent on the
    pod's node in the container's cgroup, restored exactly on revert."""

    def __init__(self, at: Placement) -> None:
        super().__init__(at, confirm=False)
        container = at.platform.container
        try:
            pod = self.kube.pod(self.pod.namespace, self.pod.name)
        except KubeError as exc:
            raise InjectionError(f"kubernetes: {exc}") from None
        where = f"pod {self.pod.namespace}/{self.pod.name}"
        if pod is None:
            raise InjectionError(f"{where} of {at.host} is gone")
        status = pod.get("status") or {}
        ids = {
            c.get("name"): str(c.get("containerID") or "").split("://")[-1]
            for c in status.get("containerStatuses") or []
        }
        if not status.get("hostIP") or not ids.get(container):
            raise InjectionError(
                f"{where} has no host IP or no running container {container} yet: "
                "nothing for the node agent to cap"
            )
        agent = at.platform.node_agent
        fault = at.fault
        if fault.kind != "iops-throttle":
            raise InjectionError(f"the node agent caps I/O: not a {fault.kind}")
        limits = {
            "riops": fault.read_iops,
            "wiops": fault.write_iops,
            "rbps": round(fault.read_mb_s * MIB) if fault.read_mb_s else None,
            "wbps": round(fault.write_mb_s * MIB) if fault.write_mb_s else None,
        }
        self.limits = {k: v for k, v in limits.items() if v is not None}
        self.request = {
            "pod_uid": pod["metadata"]["uid"],
            "container_id": ids[container],
            "volume_path": at.platform.volume_path,
        }
        self.agent = f"https://{status['hostIP']}:{agent.port}"
        self.ca_file = agent.ca_file
        self.container = container
        self.answer: dict[str, Any] = {}

    def describe(self) -> str:
        caps = ", ".join(f"{k} {v}" for k, v in self.limits.items())
        return (
            f"cap {caps} on {self.platform.volume_path} of pod {self.pod.namespace}/"
            f"{self.pod.name} (container {self.container}) through the node agent at {self.agent}"
        )

    def revert_action(self) -> dict[str, Any]:
        return {
            "action": "kubernetes.node-agent-clear",
            **self.kube.access.as_action(),
            "agent": self.agent,
            "ca_file": self.ca_file,
            "pod": f"{self.pod.namespace}/{self.pod.name}",
            **self.request,
        }

    def _call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            return call(self.agent, agent_token(self.kube), path, body, self.ca_file)
        except (AgentError, KubeError) as exc:  # KubeError: no token for the agent
            raise InjectionError(f"iops-throttle of {self.target}: {exc}") from None

    def inject(self) -> None:
        self.answer = self._call("/v1/cap", {**self.request, "limits": self.limits})

    def verify(self, timeout_s: float) -> bool:
        now = self._call("/v1/limits", self.request)["limits"]
        return all(now.get(k) == v for k, v in self.limits.items())

    def revert(self) -> None:
        self._call("/v1/clear", self.request)

    def report(self) -> dict[str, Any]:
        keep = ("cgroup", "device", "cgroup_version", "limits")
        return {"cap": {k: self.answer[k] for k in keep if k in self.answer}}


def clear_cap(kube: Kube, action: dict[str, Any]) -> str:
    """Carry out a journaled `kubernetes.node-agent-clear`: the agent restores the limits."""
    request = {k: action[k] for k in ("pod_uid", "container_id", "volume_path")}
    try:
        done = call(action["agent"], agent_token(kube), "/v1/clear", request, action["ca_file"])
    except AgentError as exc:
        if exc.status == 404:  # the pod or its container is gone, and its cgroup with it
            return f"pod {action['pod']}: {exc}; nothing to restore"
        raise KubeError(str(exc), exc.status) from None
    return f"pod {action['pod']}: I/O limits on {done['device']} restored ({done['cgroup']})"


class NodeDrain(KubeFault):
    """host-kill scope node, engine native: cordon the member's node, evict its pods through the
    eviction API (a PodDisruptionBudget that forbids an eviction is waited on, then refuses the
    fault), and delete the Node object, as `kubectl drain` and `kubectl delete node` do."""

    def __init__(self, at: Placement, *, zone: bool = False) -> None:
        super().__init__(at, confirm=True)
        if not at.pod.node:
            raise InjectionError(
                f"pod {at.pod.namespace}/{at.pod.name} of {at.host} is not scheduled on "
                "a node: nothing to drain"
            )
        self.node = at.pod.node
        # A zone's outage is a kill (grace 0 unless told) and its nodes come back: kept.
        self.delete_node = self.options.delete_node and not zone
        self.grace_s = (
            math.ceil(self.options.grace_period)
            if zone or "grace_period" in self.options.model_fields_set
            else None
        )
        self.evicted: list[tuple[str, str]] = []

    def describe(self) -> str:
        then = "delete the Node object" if self.delete_node else "keep it cordoned"
        return f"drain node {self.node} (cordon, evict its pods), then {then}"

    def revert_action(self) -> dict[str, Any]:
        return {
            "action": "kubernetes.uncordon-node",
            **self.kube.access.as_action(),
            "node": self.node,
        }

    @kube_errors("draining the node of")
    def inject(self) -> None:
        assert self.watch is not None
        self.watch.start()
        self.kube.set_unschedulable(self.node, True)
        deadline = time.monotonic() + self.platform.wait
        for pod in self.kube.pods(None, fields=f"spec.nodeName={self.node}"):
            if _drain_skips(pod):
                continue
            meta = pod["metadata"]
            self._evict(meta["namespace"], meta["name"], deadline)
        for namespace, name in self.evicted:
            self._wait_pod_gone(namespace, name, deadline)
        if self.delete_node:
            self.kube.delete_node(self.node)

    def _evict(self, namespace: str, name: str, deadline: float) -> None:
        while True:
            try:
                self.kube.evict(namespace, name, self.grace_s)
            except KubeError as exc:
                if exc.status == 404:
                    return
                if exc.status != 429:
                    raise
                if time.monotonic() >= deadline:
                    raise KubeError(
                        f"evicting pod {namespace}/{name} from node {self.node} is "
                        f"refused after {self.platform.wait:g}s: {exc} (a "
                        "PodDisruptionBudget forbids it)"
                    ) from None
                time.sleep(1.0)
                continue
            self.evicted.append((namespace, name))
            return

    def _wait_pod_gone(self, namespace: str, name: str, deadline: float) -> None:
        while True:
            pod = self.kube.pod(namespace, name)
            if pod is None or (pod.get("spec") or {}).get("nodeName") != self.node:
                return
            if time.monotonic() >= deadline:
                raise KubeError(
                    f"evicted pod {namespace}/{name} is still on node {self.node} "
                    f"after {self.platform.wait:g}s"
                )
            time.sleep(POLL_S)

    @kube_errors("waiting for the drain of")
    def verify(self, timeout_s: float) -> bool:
        node = self.kube.node(self.node)
        if self.delete_node and node is not None:
            return False
        if not self.delete_node and not (node or {}).get("spec", {}).get("unschedulable"):
            return False
        return self._confirm(timeout_s)

    @kube_errors("uncordoning the node of")
    def revert(self) -> None:
        uncordon(self.kube, self.node)


def _drain_skips(pod: dict[str, Any]) -> bool:
    """Pods a drain leaves alone: DaemonSet pods, mirror (static) pods, and finished ones."""
    meta = pod["metadata"]
    owners = meta.get("ownerReferences") or []
    return (
        any(o.get("kind") == "DaemonSet" for o in owners)
        or "kubernetes.io/config.mirror" in (meta.get("annotations") or {})
        or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
    )


# -- revert actions (also carried out by `rsdrill recover`, from the journal alone) -------------


def delete_action(
    access: ClusterAccess, rtype: ResourceType, namespace: str, name: str, wait_s: float
) -> dict[str, Any]:
    return {
        "action": "kubernetes.delete-chaos",
        **access.as_action(),
        "namespace": namespace,
        "group": rtype.group,
        "version": rtype.version,
        "plural": rtype.plural,
        "kind": rtype.kind,
        "name": name,
        "wait_s": wait_s,
    }


def uncordon(kube: Kube, node: str) -> str:
    found = kube.node(node)
    if found is None:
        return f"node {node} is gone (deleted by the fault); nothing to uncordon"
    if not (found.get("spec") or {}).get("unschedulable"):
        return f"node {node} is schedulable already"
    kube.set_unschedulable(node, False)
    return f"node {node} uncordoned"


def delete_resource(kube: Kube, action: dict[str, Any]) -> str:
    rtype = ResourceType(action["group"], action["version"], action["plural"], action["kind"])
    namespace, name = action["namespace"], action["name"]
    deleted = kube.delete(rtype, namespace, name)
    kube.wait_gone(rtype, namespace, name, float(action.get("wait_s", 60.0)))
    if not deleted:
        return f"{rtype.kind} {namespace}/{name} is gone already"
    return f"{rtype.kind} {namespace}/{name} deleted (its fault recovered)"
