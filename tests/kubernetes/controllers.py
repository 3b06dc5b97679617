"""Stand-ins for the chaos controllers that cannot run here (Kubernetes' own controller-manager
and scheduler do: tests/kubernetes/cluster.py; so does Chaos Mesh's: tests/kubernetes/chaos_mesh.py;
the kubelet's part is tests/kubernetes/kubelet.py), and a record of Chaos Mesh's objects.

- `LitmusOperator`, a thread polling the real API server: runs a ChaosEngine's experiment: engine
  status, a ChaosResult that goes Running → Completed with a verdict and probe statuses;
  pod-delete deletes the target pod (Litmus's Go modules are refused by the module proxy here).
- `ChaosObjects`: every Chaos Mesh object made in a namespace, for the tests' assertions.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Self

LITMUS_FINALIZER = "chaosengine.litmuschaos.io/finalizer"
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


class ChaosObjects(Loop):
    """A record of every Chaos Mesh object made in `namespace`, as first listed (after Chaos
    Mesh's webhooks): the real controller-manager acts on them."""

    def __init__(self, api: Any, namespace: str) -> None:
        from kubernetes import client

        super().__init__("chaos-objects")
        self.custom = client.CustomObjectsApi(api)
        self.namespace = namespace
        self.seen: list[dict[str, Any]] = []
        self._recorded: set[str] = set()

    def tick(self) -> None:
        from kubernetes.client.rest import ApiException

        from tests.kubernetes.support import CHAOS_PLURALS

        for plural in CHAOS_PLURALS:
            try:
                items = self.custom.list_namespaced_custom_object(
                    "chaos-mesh.org", "v1alpha1", self.namespace, plural
                )["items"]
            except ApiException as exc:
                if exc.status == 404:
                    continue  # that CRD is not installed
                raise
            for item in items:
                if item["metadata"]["uid"] not in self._recorded:
                    self._recorded.add(item["metadata"]["uid"])
                    self.seen.append(item)


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
