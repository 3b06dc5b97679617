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
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Self

LITMUS_FINALIZER = "chaosengine.litmuschaos.io/finalizer"
TICK_S = 0.05


def now() -> str:
    """The time as the API's timestamps spell it (seconds)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def keep_error(errors: list[BaseException], exc: BaseException) -> None:
    """Keep `exc` for the test to read, unless the last one kept is of its kind."""
    if not errors or type(exc) is not type(errors[-1]):
        errors.append(exc)


def told(errors: list[BaseException]) -> str:
    """Kept errors with where each was raised: a bare repr (CI86's `KeyError('PYTEST_CURRENT_TEST')`
    from a harness thread) does not say which call met it."""
    return "\n".join("".join(traceback.format_exception(error)) for error in errors)


def watch_until(
    stop: threading.Event,
    on_event: Callable[[dict[str, Any]], None],
    errors: list[BaseException],
    list_fn: Callable[..., Any],
    *args: Any,
) -> None:
    """Each watch event of `list_fn(*args)` to `on_event` ({"type", "object"}) until `stop`.
    A stream ends every second to look at `stop`; the next starts with what exists (ADDED
    events), so an object made between two is seen unless it is also gone before the next
    starts (a few milliseconds). A resource the API does not serve (404)
    ends the watch; other errors are kept in `errors`."""
    from kubernetes import watch
    from kubernetes.client.rest import ApiException

    while not stop.is_set():
        try:
            for event in watch.Watch().stream(list_fn, *args, timeout_seconds=1):
                on_event(event)
        except ApiException as exc:
            if exc.status == 404:
                return
            keep_error(errors, exc)
            stop.wait(0.05)
        except Exception as exc:  # the test reads `errors`; the watch goes on
            keep_error(errors, exc)
            stop.wait(0.05)


class Threads:
    """Threads started together and stopped together (each ends once `_stop` is set), and
    the errors they kept for the test to read."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self.errors: list[BaseException] = []
        self._threads: list[threading.Thread] = []

    def start(self) -> Self:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=10)


class Loop(Threads):
    """A thread that ticks every `interval_s` (or as `next_wait_s` says), and at once when
    woken (`wake`): by each watch event of `watched` (a list call and its arguments), when
    given. It keeps the errors it met, one of each kind in a row."""

    def __init__(
        self, name: str, interval_s: float = TICK_S, watched: tuple[Any, ...] = ()
    ) -> None:
        super().__init__()
        self._interval_s = interval_s
        self._woken = threading.Event()
        self._threads.append(threading.Thread(target=self._run, name=name, daemon=True))
        if watched:
            self._threads.append(threading.Thread(
                target=watch_until, name=f"{name}-watch", daemon=True,
                args=(self._stop, lambda _: self.wake(), self.errors, *watched)))  # fmt: skip

    def stop(self) -> None:
        self._stop.set()
        self._woken.set()
        super().stop()

    def wake(self) -> None:
        """Tick now, not at the end of the interval."""
        self._woken.set()

    def next_wait_s(self) -> float:
        """How long to wait for a wake before the next tick."""
        return self._interval_s

    def _run(self) -> None:
        while True:
            self._woken.wait(self.next_wait_s())
            self._woken.clear()  # before the tick: a wake during it is a tick more
            if self._stop.is_set():
                return
            try:
                self.tick()
            except Exception as exc:  # the test reads `errors`; the loop keeps going
                keep_error(self.errors, exc)

    def tick(self) -> None:
        raise NotImplementedError


class ChaosObjects(Threads):
    """A record of every Chaos Mesh object made in `namespace`, as first seen (after Chaos
    Mesh's webhooks): the real controller-manager acts on them.

    Watched, a thread per kind (`watch_until`): listing the six kinds every 50 ms cost a third
    of a core, the API server's and this process's."""

    def __init__(self, api: Any, namespace: str) -> None:
        from kubernetes import client

        from tests.kubernetes.support import CHAOS_PLURALS

        super().__init__()
        self.custom = client.CustomObjectsApi(api)
        self.namespace = namespace
        self.seen: list[dict[str, Any]] = []
        self._recorded: set[str] = set()
        self._lock = threading.Lock()
        self._threads += [
            threading.Thread(target=self._watch, args=(plural,), name=f"chaos-{plural}",
                             daemon=True)
            for plural in CHAOS_PLURALS
        ]  # fmt: skip

    def _watch(self, plural: str) -> None:
        watch_until(self._stop, self._record, self.errors,
                    self.custom.list_namespaced_custom_object, "chaos-mesh.org", "v1alpha1",
                    self.namespace, plural)  # fmt: skip

    def _record(self, event: dict[str, Any]) -> None:
        item = event["object"]
        with self._lock:
            if item["metadata"]["uid"] not in self._recorded:
                self._recorded.add(item["metadata"]["uid"])
                self.seen.append(item)


class LitmusOperator(Loop):
    def __init__(self, api: Any, namespace: str, *, verdict: str = "Pass") -> None:
        from kubernetes import client

        self.custom = client.CustomObjectsApi(api)
        # Woken by its engines' watch events; ticking every 50 ms only while an experiment
        # runs (it ends after its duration), as the kubelet harness no longer lists its pods
        # every 50 ms (that cost a tenth of a core; this loop's own cost was not measured).
        engines = (self.custom.list_namespaced_custom_object, "litmuschaos.io", "v1alpha1",
                   namespace, "chaosengines")  # fmt: skip
        super().__init__("fake-litmus", watched=engines)
        self.core = client.CoreV1Api(api)
        self.namespace = namespace
        self.verdict = verdict
        self.started: dict[str, float] = {}
        self.finished: set[str] = set()

    def next_wait_s(self) -> float:
        return TICK_S if self.started.keys() - self.finished else 1.0

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
        self.finished.add(name)
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
