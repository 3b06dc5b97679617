"""Stand-ins for the chaos controllers that do not run on the test cluster (Kubernetes' own
controller-manager and scheduler do: tests/kubernetes/cluster.py; the kubelet's part is
tests/kubernetes/kubelet.py).

Each is a thread polling the real API server and writing what the real controller would:
- `ChaosMeshController`: on a new chaos object, adds Chaos Mesh's finalizer, "injects" into the
  selected pods (pod-kill deletes them) and writes the status Chaos Mesh writes (conditions
  Selected/AllInjected, one container record per pod); on deletion, marks it recovered and drops
  the finalizer so the object goes away.
- `LitmusOperator`: runs a ChaosEngine's experiment: engine status, a ChaosResult that goes
  Running → Completed with a verdict and probe statuses; pod-delete deletes the target pod.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Self

FINALIZER = "chaos-mesh/records"
LITMUS_FINALIZER = "chaosengine.litmuschaos.io/finalizer"
CHAOS_KINDS = ("podchaos", "iochaos", "networkchaos", "blockchaos", "timechaos", "stresschaos")
TICK_S = 0.05


def now() -> str:
    """The time as the API's timestamps spell it (seconds)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Loop:
    """A polling thread (every `interval_s`) that stops when asked and keeps the errors it
    met, one of each kind in a row."""

    def __init__(self, name: str, interval_s: float = TICK_S) -> None:
        self._interval_s = interval_s
        self._stop = threading.Event()
        self.errors: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self.tick()
            except Exception as exc:  # the test reads `errors`; the loop keeps going
                if not self.errors or type(exc) is not type(self.errors[-1]):
                    self.errors.append(exc)

    def tick(self) -> None:
        raise NotImplementedError


class ChaosMeshController(Loop):
    """See the module's docstring; with `acts` False it only records what it sees (`seen`),
    where the real controller-manager acts."""

    def __init__(self, api: Any, namespace: str, *, acts: bool = True) -> None:
        from kubernetes import client

        super().__init__("fake-chaos-mesh")
        self.acts = acts
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.namespace = namespace
        self.seen: list[dict[str, Any]] = []  # every object as first created (for assertions)
        self._recorded: set[str] = set()

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
                    if FINALIZER in finalizers and self.acts:
                        self._recover(plural, item)
                elif not self.acts:
                    if item["metadata"]["uid"] not in self._recorded:
                        self._recorded.add(item["metadata"]["uid"])
                        self.seen.append(item)
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
            # As Chaos Mesh: no records, so Selected False (written before any selection too),
            # and what the selection found only in an Event on the object.
            status = {
                "conditions": [
                    {"type": "Selected", "status": "False"},
                    {"type": "AllInjected", "status": "False"},
                ],
                "experiment": {"desiredPhase": "Run"},
            }
            self._patch(plural, name, {"status": status})
            meta = item["metadata"]
            self.core.create_namespaced_event(self.namespace, {
                "metadata": {"generateName": f"{name}."},
                "involvedObject": {"apiVersion": item["apiVersion"], "kind": item["kind"],
                                   "name": name, "namespace": self.namespace,
                                   "uid": meta["uid"]},
                "type": "Warning", "reason": "Failed",
                "message": "Failed to select targets: no target has been selected",
                "source": {"component": "fake-chaos-mesh"},
                "firstTimestamp": now(), "lastTimestamp": now(), "count": 1,
            })  # fmt: skip
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
                "events": [{"type": "Succeeded", "operation": "Apply", "timestamp": now()}],
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


class LitmusOperator(Loop):
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
                        "lastUpdateTime": now(),
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
