"""Stand-ins for the controllers that do not run on the test API server.

Each is a thread polling the real API server and writing what the real controller would:
- `ChaosMeshController`: on a new chaos object, adds Chaos Mesh's finalizer, "injects" into the
  selected pods (pod-kill deletes them) and writes the status Chaos Mesh writes (conditions
  Selected/AllInjected, one container record per pod); on deletion, marks it recovered and drops
  the finalizer so the object goes away.
- `LitmusOperator`: runs a ChaosEngine's experiment: engine status, a ChaosResult that goes
  Running → Completed with a verdict and probe statuses; pod-delete deletes the target pod.
- `Kubelet`: finishes graceful deletions (no kubelet confirms them here) and, for pods bound to
  sandbox members, kills the member when its pod goes and restarts it when the pod is
  re-created; with `recreate_after_s` it also plays the StatefulSet controller and the
  scheduler of a pod whose volume is on its node: it comes back there once the node is
  schedulable.
- `ContainerRuntime`: the kubelet's side of a pod whose container is a member process: its
  container status (id, running, restartCount) published as the process changes, and a
  container whose process exited started again (restartPolicy Always), the restart counted.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

FINALIZER = "chaos-mesh/records"
LITMUS_FINALIZER = "chaosengine.litmuschaos.io/finalizer"
CHAOS_KINDS = ("podchaos", "iochaos", "networkchaos", "blockchaos", "timechaos", "stresschaos")
TICK_S = 0.05


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class _Loop:
    """A polling thread that stops when asked and keeps the first error it met."""

    def __init__(self, name: str) -> None:
        self._stop = threading.Event()
        self.errors: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> _Loop:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(TICK_S):
            try:
                self.tick()
            except Exception as exc:  # the test reads `errors`; the loop keeps going
                if not self.errors or type(exc) is not type(self.errors[-1]):
                    self.errors.append(exc)

    def tick(self) -> None:
        raise NotImplementedError


class ChaosMeshController(_Loop):
    def __init__(self, api: Any, namespace: str) -> None:
        from kubernetes import client

        super().__init__("fake-chaos-mesh")
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.namespace = namespace
        self.seen: list[dict[str, Any]] = []  # every object as first created (for assertions)

    def tick(self) -> None:
        from kubernetes.client.rest import ApiException

        for plural in CHAOS_KINDS:
            try:
                items = self.custom.list_namespaced_custom_object(
                    "chaos-mesh.org", "v1alpha1", self.namespace, plural
                )["items"]
            except ApiException as exc:
                if exc.status == 404:
                    continue  # that CRD is not installed
                raise
            for item in items:
                meta = item["metadata"]
                finalizers = meta.get("finalizers") or []
                if meta.get("deletionTimestamp"):
                    if FINALIZER in finalizers:
                        self._recover(plural, item)
                elif FINALIZER not in finalizers:
                    self.seen.append(item)
                    self._inject(plural, item)

    def _patch(self, plural: str, name: str, body: dict[str, Any]) -> None:
        # Chaos Mesh's CRDs have no status subresource: status is written with the object.
        self.custom.patch_namespaced_custom_object(
            "chaos-mesh.org", "v1alpha1", self.namespace, plural, name, body
        )

    def _selected(self, item: dict[str, Any]) -> list[tuple[str, str]]:
        from kubernetes.client.rest import ApiException

        found = []
        for namespace, names in (item["spec"]["selector"].get("pods") or {}).items():
            for name in names:
                try:
                    self.core.read_namespaced_pod(name, namespace)
                except ApiException as exc:
                    if exc.status == 404:
                        continue
                    raise
                found.append((namespace, name))
        return found

    def _inject(self, plural: str, item: dict[str, Any]) -> None:
        name = item["metadata"]["name"]
        self._patch(plural, name, {"metadata": {"finalizers": [FINALIZER]}})
        pods = self._selected(item)
        if not pods:
            status = {
                "conditions": [
                    {
                        "type": "Selected",
                        "status": "False",
                        "reason": "no pod matches the selector",
                    },
                    {"type": "AllInjected", "status": "False"},
                ],
                "experiment": {"desiredPhase": "Run"},
            }
            self._patch(plural, name, {"status": status})
            return
        if item["spec"].get("action") == "pod-kill":  # TimeChaos and StressChaos have none
            for namespace, pod in pods:
                self.core.delete_namespaced_pod(pod, namespace, grace_period_seconds=0)
        records = [
            {
                "id": f"{ns}/{pod}",
                "selectorKey": ".",
                "phase": "Injected",
                "injectedCount": 1,
                "recoveredCount": 0,
                "events": [{"type": "Succeeded", "operation": "Apply", "timestamp": _now()}],
            }
            for ns, pod in pods
        ]
        status = {
            "conditions": [
                {"type": "Selected", "status": "True"},
                {"type": "AllInjected", "status": "True"},
                {"type": "AllRecovered", "status": "False"},
                {"type": "Paused", "status": "False"},
            ],
            "experiment": {"desiredPhase": "Run", "containerRecords": records},
        }
        self._patch(plural, name, {"status": status})

    def _recover(self, plural: str, item: dict[str, Any]) -> None:
        name = item["metadata"]["name"]
        finalizers = [f for f in item["metadata"]["finalizers"] if f != FINALIZER]
        self._patch(plural, name, {"metadata": {"finalizers": finalizers or None}})


class LitmusOperator(_Loop):
    def __init__(self, api: Any, namespace: str, *, verdict: str = "Pass") -> None:
        from kubernetes import client

        super().__init__("fake-litmus")
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.namespace = namespace
        self.verdict = verdict
        self.started: dict[str, float] = {}

    def _call(self, method: Callable[..., Any], plural: str, *args: Any) -> Any:
        return method("litmuschaos.io", "v1alpha1", self.namespace, plural, *args)

    def tick(self) -> None:
        engines = self._call(self.custom.list_namespaced_custom_object, "chaosengines")["items"]
        for engine in engines:
            meta, spec = engine["metadata"], engine["spec"]
            name = meta["name"]
            experiment = spec["experiments"][0]
            result = f"{name}-{experiment['name']}"
            if meta.get("deletionTimestamp"):
                self._call(
                    self.custom.patch_namespaced_custom_object,
                    "chaosengines",
                    name,
                    {"metadata": {"finalizers": None}},
                )
                continue
            if name not in self.started:
                self._start(engine, result)
                continue
            env = {
                e["name"]: e.get("value", "")
                for e in experiment["spec"]["components"].get("env", [])
            }
            done = time.monotonic() - self.started[name] >= float(env["TOTAL_CHAOS_DURATION"])
            stopped = spec["engineState"] == "stop"
            status = (engine.get("status") or {}).get("engineStatus")
            if (done or stopped) and status == "initialized":
                self._finish(engine, result, stopped=stopped and not done)

    def _start(self, engine: dict[str, Any], result: str) -> None:
        name = engine["metadata"]["name"]
        experiment = engine["spec"]["experiments"][0]
        self.started[name] = time.monotonic()
        self._call(
            self.custom.patch_namespaced_custom_object,
            "chaosengines",
            name,
            {"metadata": {"finalizers": [LITMUS_FINALIZER]}},
        )
        self._set_engine(name, experiment["name"], "initialized", "Running", "Awaited")
        self._call(
            self.custom.create_namespaced_custom_object,
            "chaosresults",
            {
                "apiVersion": "litmuschaos.io/v1alpha1",
                "kind": "ChaosResult",
                "metadata": {"name": result},
                "spec": {"engine": name, "experiment": experiment["name"]},
            },
        )
        self._set_result(result, "Running", "Awaited", [])
        env = {
            e["name"]: e.get("value", "") for e in experiment["spec"]["components"].get("env", [])
        }
        if experiment["name"] == "pod-delete":
            self.core.delete_namespaced_pod(
                env["TARGET_PODS"], self.namespace, grace_period_seconds=0
            )

    def _finish(self, engine: dict[str, Any], result: str, *, stopped: bool) -> None:
        name = engine["metadata"]["name"]
        experiment = engine["spec"]["experiments"][0]
        verdict = "Stopped" if stopped else self.verdict
        probes = [
            {
                "name": p["name"],
                "type": p["type"],
                "mode": p["mode"],
                "status": {
                    "verdict": "Passed" if verdict == "Pass" else "Failed",
                    "description": "the pod is present",
                },
            }
            for p in experiment["spec"].get("probe", [])
        ]
        self._set_result(result, "Stopped" if stopped else "Completed", verdict, probes)
        self._set_engine(
            name,
            experiment["name"],
            "stopped" if stopped else "completed",
            "Forcefully Aborted" if stopped else "Completed",
            verdict,
        )

    def _set_engine(
        self, name: str, experiment: str, engine_status: str, status: str, verdict: str
    ) -> None:
        body = {
            "status": {
                "engineStatus": engine_status,
                "experiments": [
                    {
                        "name": experiment,
                        "runner": f"{name}-runner",
                        "experimentPod": f"{name}-exp",
                        "status": status,
                        "verdict": verdict,
                        "lastUpdateTime": _now(),
                    }
                ],
            }
        }
        self._call(self.custom.patch_namespaced_custom_object_status, "chaosengines", name, body)

    def _set_result(self, name: str, phase: str, verdict: str, probes: list[Any]) -> None:
        passed = sum(p["status"]["verdict"] == "Passed" for p in probes)
        experiment_status: dict[str, Any] = {"phase": phase, "verdict": verdict}
        if probes:
            experiment_status["probeSuccessPercentage"] = str(round(100 * passed / len(probes)))
        body = {"status": {"experimentStatus": experiment_status, "probeStatuses": probes}}
        self._call(self.custom.patch_namespaced_custom_object_status, "chaosresults", name, body)


class Kubelet(_Loop):
    """Confirms pod deletions; plays the StatefulSet controller for `recreate` pods, and binds
    pods to sandbox members (`on_gone(pod)` when a pod goes, `on_back(pod)` once re-created)."""

    def __init__(
        self,
        api: Any,
        namespace: str,
        *,
        recreate_after_s: float | None = None,
        on_gone: Callable[[str], None] | None = None,
        on_back: Callable[[str], None] | None = None,
    ) -> None:
        from kubernetes import client

        super().__init__("fake-kubelet")
        self.core = client.CoreV1Api(api)
        self.namespace = namespace
        self.recreate_after_s = recreate_after_s
        self.on_gone = on_gone
        self.on_back = on_back
        self.templates: dict[str, dict[str, Any]] = {}
        self.uids: dict[str, str] = {}
        self.gone_at: dict[str, float] = {}
        self.absences: list[tuple[str, float]] = []  # (pod, seconds gone), once back

    def _cordoned(self, node: str | None) -> bool:
        from kubernetes.client.rest import ApiException

        try:
            return bool(node and self.core.read_node(node).spec.unschedulable)
        except ApiException as exc:
            if exc.status == 404:  # deleted (a drain that deletes its node): nowhere to go
                return True
            raise

    def adopt(self, manifest: dict[str, Any], uid: str) -> None:
        """Remember a pod (its manifest as created, and its uid) to watch and re-create."""
        self.templates[manifest["metadata"]["name"]] = manifest
        self.uids[manifest["metadata"]["name"]] = uid

    def tick(self) -> None:
        from kubernetes.client.rest import ApiException

        present = {}
        for pod in self.core.list_namespaced_pod(self.namespace).to_dict()["items"]:
            meta = pod["metadata"]
            if meta.get("deletion_timestamp"):
                try:
                    self.core.delete_namespaced_pod(
                        meta["name"], self.namespace, grace_period_seconds=0
                    )
                except ApiException as exc:
                    if exc.status != 404:  # gone meanwhile: nothing left to confirm
                        raise
                continue
            present[meta["name"]] = meta["uid"]
        for name, uid in list(self.uids.items()):
            if present.get(name) != uid and name not in self.gone_at:
                self.gone_at[name] = time.monotonic()
                if self.on_gone:
                    self.on_gone(name)
        for name, since in list(self.gone_at.items()):
            if self.recreate_after_s is None or time.monotonic() - since < self.recreate_after_s:
                continue
            if name not in present:
                from tests.kubernetes.support import mark_running

                if self._cordoned(self.templates[name]["spec"].get("nodeName")):
                    continue  # its volume is on that node: the pod waits, Pending

                created = self.core.create_namespaced_pod(self.namespace, self.templates[name])
                mark_running(self.core.api_client, self.namespace, name)
                present[name] = created.metadata.uid
            self.uids[name] = present[name]
            self.absences.append((name, time.monotonic() - since))
            del self.gone_at[name]
            if self.on_back:
                self.on_back(name)


class ContainerRuntime(_Loop):
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

        super().__init__("fake-container-runtime")
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
