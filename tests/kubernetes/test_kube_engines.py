"""Every engine x fault against the real kube-apiserver: the object rsdrill creates passes the
real CRD schema and Chaos Mesh's webhooks, rsdrill waits for Chaos Mesh's real controller (or
the Litmus stand-in) to report it injected, reverts, and nothing is left behind. The same
through the journal's revert actions (`rsdrill recover`)."""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rsdrill.cli.app import app
from rsdrill.engine.journal import Journal
from rsdrill.experiment.loader import ExperimentError, load_experiment_text
from rsdrill.platforms.base import InjectionError, TargetError
from rsdrill.platforms.kubernetes.actions import REVERT_ACTIONS
from rsdrill.platforms.kubernetes.client import ClusterAccess, KubeError
from rsdrill.platforms.kubernetes.client import Kube as KubeClient
from rsdrill.platforms.kubernetes.resources import (
    CHAOS_ENGINE,
    CHAOS_EXPERIMENT,
    MIB,
    STRESS_CHAOS,
    plan_details,
)
from rsdrill.platforms.kubernetes.target import KubernetesTarget, make_target
from rsdrill.platforms.stress import MAX_STRESS_WORKERS
from tests.harness.injectors import pod_injector
from tests.kubernetes.conftest import Kube
from tests.kubernetes.controllers import LitmusOperator, told
from tests.kubernetes.kubelet import Kubelet
from tests.kubernetes.support import (
    experiment,
    install_litmus_experiment,
    make_node,
    make_statefulset,
    member,
    rsdrill_objects,
    wait_running,
)

LITMUS_EXPERIMENTS = ("pod-delete", "node-drain", "disk-fill")
# The pod-network experiments with the variables their ChaosExperiments declare in
# litmuschaos/chaos-charts (faults/kubernetes/<name>/fault.yaml): what an engine may set.
_NETWORK_ENV = ("TARGET_CONTAINER", "NETWORK_INTERFACE", "LIB_IMAGE", "TC_IMAGE",
                "TOTAL_CHAOS_DURATION", "RAMP_TIME", "PODS_AFFECTED_PERC", "TARGET_PODS",
                "CONTAINER_RUNTIME", "DEFAULT_HEALTH_CHECK", "DESTINATION_IPS",
                "DESTINATION_HOSTS", "SOCKET_PATH", "NODE_LABEL", "SEQUENCE")  # fmt: skip
LITMUS_NETWORK_ENV = {
    "pod-network-latency": (*_NETWORK_ENV, "NETWORK_LATENCY", "JITTER"),
    "pod-network-loss": (*_NETWORK_ENV, "NETWORK_PACKET_LOSS_PERCENTAGE"),
    "pod-network-duplication": (*_NETWORK_ENV, "NETWORK_PACKET_DUPLICATION_PERCENTAGE"),
    "pod-network-corruption": (*_NETWORK_ENV, "NETWORK_PACKET_CORRUPTION_PERCENTAGE"),
}
# The StatefulSet mongo's five pods (a five-member set for partition shapes) have these limits
# on their mongod containers (a StressChaos is sized from them); the one pod of the StatefulSet
# UNLIMITED has none.
LIMITS = {"cpu": "1500m", "memory": "512Mi"}
UNLIMITED = "plain"
PODS = 5


@dataclass
class Env:
    kube: Kube
    namespace: str
    nodes: list[str]
    kubelet: Kubelet
    # Each chaos object as it was while its fault was in force.
    stored: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    def target(
        self, faults: list[dict[str, Any]], tmp: Path, members: int = 3, **platform: Any
    ) -> KubernetesTarget:
        exp = experiment(self.kube.admin, self.namespace, faults, **platform)
        target = make_target(exp, tmp)
        target.members = [member(self.namespace, i) for i in range(members)]
        target.preflight()
        return target

    def core(self) -> Any:
        from kubernetes import client

        return client.CoreV1Api(self.kube.api)


@pytest.fixture(scope="module")
def env(kube: Kube) -> Iterator[Env]:
    namespace = kube.namespace("engines")
    nodes = [f"{namespace}-node-{i}" for i in range(PODS)]
    for node in nodes:
        make_node(kube.api, node)
    kubelet = Kubelet(kube.api, namespace)
    for name in LITMUS_EXPERIMENTS:
        install_litmus_experiment(kube.api, namespace, name)
    for name, variables in LITMUS_NETWORK_ENV.items():
        install_litmus_experiment(kube.api, namespace, name, variables)
    litmus = LitmusOperator(kube.api, namespace)
    loops = [litmus.start(), kubelet.start()]
    pods = make_statefulset(kube.api, namespace, nodes, limits=LIMITS)
    pods += make_statefulset(kube.api, namespace, nodes[:1], name=UNLIMITED)
    wait_running(kube.api, namespace, pods)
    yield Env(kube, namespace, nodes, kubelet)
    for loop in loops:
        loop.stop()
    for loop in loops:
        assert not loop.errors, f"{type(loop).__name__}: {told(loop.errors)}"


def _round_trip(
    env: Env,
    fault: dict[str, Any],
    tmp: Path,
    host_index: int = 0,
    members: int = 3,
    set_name: str = "mongo",
    **platform: Any,
) -> tuple[Any, list[tuple[str, str]]]:
    """Inject, verify, revert (on member `host_index` of the StatefulSet `set_name`); the
    injector and what existed while the fault was in force."""
    target = env.target([fault], tmp, members, **platform)
    host = member(env.namespace, host_index, set_name)
    injector = pod_injector(target, target.faults[0], host)
    action = injector.revert_action()
    injector.inject()
    assert injector.verify(5.0), injector.describe()
    during = rsdrill_objects(env.kube.api, env.namespace)
    env.stored += [_stored(env, kind, name) for kind, name in during]
    injector.revert()
    assert rsdrill_objects(env.kube.api, env.namespace) == []
    if action is not None:  # idempotent, also from the journal alone
        assert REVERT_ACTIONS[action["action"]](action)
    target.teardown()
    return injector, during


def _stored(env: Env, kind: str, name: str) -> dict[str, Any]:
    from kubernetes import client

    group = "litmuschaos.io" if kind == "ChaosEngine" else "chaos-mesh.org"
    plural = "chaosengines" if kind == "ChaosEngine" else kind.lower()
    return dict(client.CustomObjectsApi(env.kube.api).get_namespaced_custom_object(
        group, "v1alpha1", env.namespace, plural, name))  # fmt: skip


def _spec_of(env: Env, kind: str) -> dict[str, Any]:
    """The newest `kind` object's spec as it was in force: Chaos Mesh's webhook adds the
    object's own namespace to each selector, which is left out here."""
    spec = copy.deepcopy(next(o for o in reversed(env.stored) if o["kind"] == kind)["spec"])
    for selector in (spec.get("selector"), (spec.get("target") or {}).get("selector")):
        if selector is not None:
            assert selector.pop("namespaces", [env.namespace]) == [env.namespace], selector
    return spec


def test_chaos_mesh_pod_kill_round_trip(env: Env, tmp_path: Path) -> None:
    uid_before = env.core().read_namespaced_pod("mongo-0", env.namespace).metadata.uid
    _, during = _round_trip(
        env, {"at": "1s", "kind": "host-kill", "engine": "chaos-mesh", "duration": "5s"}, tmp_path
    )
    assert [k for k, _ in during] == ["PodChaos"]
    spec = _spec_of(env, "PodChaos")
    assert spec["action"] == "pod-kill"
    assert spec["selector"] == {"pods": {env.namespace: ["mongo-0"]}}
    # Chaos Mesh's controller killed the pod; the real StatefulSet controller brought it back
    # under a new uid.
    _wait(lambda: _uid(env, "mongo-0") not in (None, uid_before))


def test_pod_failure_io_and_network_chaos_round_trips(env: Env, tmp_path: Path) -> None:
    cases = [
        ({"kind": "host-freeze", "engine": "chaos-mesh"}, "PodChaos", {"action": "pod-failure"}),
        (
            {
                "kind": "disk-fault",
                "errno": "ENOSPC",
                "operations": ["write"],
                "probability": 0.5,
                "path": "journal/*",
            },
            "IOChaos",
            {
                "action": "fault",
                "errno": 28,
                "percent": 50,
                "methods": ["write"],
                "path": "/data/db/journal/*",
                "volumePath": "/data/db",
            },
        ),
        (
            {"kind": "disk-fault", "errno": "none", "latency": "40ms"},
            "IOChaos",
            {"action": "latency", "delay": "40ms"},
        ),
        ({"kind": "volume-detach"}, "IOChaos", {"action": "fault", "errno": 5, "percent": 100}),
        (
            {"kind": "iops-throttle", "write_iops": 50, "kubernetes": {"block_chaos": "never"}},
            "IOChaos",
            {"action": "latency", "delay": "20ms", "methods": ["write", "fsync"]},
        ),
        (
            {"kind": "network-partition", "direction": "outbound"},
            "NetworkChaos",
            {
                "action": "partition",
                "direction": "to",
                "target": {
                    "mode": "all",
                    "selector": {"pods": {env.namespace: ["mongo-1", "mongo-2"]}},
                },
            },
        ),
        (
            {"kind": "network-degrade", "between": "members", "latency": "50ms",
             "jitter": "5ms", "loss": 0.05, "duplicate": 0.01, "corrupt": 0.02},
            "NetworkChaos",
            {
                "action": "netem",
                "direction": "both",
                # Each correlation "0" as Chaos Mesh's webhook writes it.
                "delay": {"latency": "50ms", "jitter": "5ms", "correlation": "0"},
                "loss": {"loss": "5", "correlation": "0"},
                "duplicate": {"duplicate": "1", "correlation": "0"},
                "corrupt": {"corrupt": "2", "correlation": "0"},
                "target": {
                    "mode": "all",
                    "selector": {"pods": {env.namespace: ["mongo-1", "mongo-2"]}},
                },
            },
        ),
        (
            # Inbound: netem on what the other members' pods send it (Chaos Mesh's `from`
            # shapes the target pods' egress towards the selected pod).
            {"kind": "network-degrade", "between": "members", "direction": "inbound",
             "latency": "1.5s", "jitter": 0.00025, "reorder": 0.25,
             "kubernetes": {"network_interface": "eth1"}},
            "NetworkChaos",
            {
                "action": "netem",
                "direction": "from",
                "device": "eth1",
                # Exact: a delay rounded to a whole second or millisecond is another fault.
                "delay": {"latency": "1500ms", "jitter": "250us", "correlation": "0",
                          "reorder": {"reorder": "25", "gap": 1, "correlation": "0"}},
                "selector": {"pods": {env.namespace: ["mongo-0"]}},
                "target": {
                    "mode": "all",
                    "selector": {"pods": {env.namespace: ["mongo-1", "mongo-2"]}},
                },
            },
        ),
        (
            # Outbound: what the member's pod sends its target pods.
            {"kind": "network-degrade", "between": "members", "direction": "outbound",
             "loss": 0.1},
            "NetworkChaos",
            {
                "action": "netem",
                "direction": "to",
                "device": None,
                "loss": {"loss": "10", "correlation": "0"},
                "selector": {"pods": {env.namespace: ["mongo-0"]}},
                "target": {
                    "mode": "all",
                    "selector": {"pods": {env.namespace: ["mongo-1", "mongo-2"]}},
                },
            },
        ),
        (
            # mongo-0 is the bridge: only mongo-1 and mongo-2 lose each other.
            {"kind": "network-partition", "shape": "bridge"},
            "NetworkChaos",
            {
                "action": "partition",
                "direction": "both",
                "selector": {"pods": {env.namespace: ["mongo-1"]}},
                "target": {"mode": "all", "selector": {"pods": {env.namespace: ["mongo-2"]}}},
            },
        ),
        (
            {"kind": "network-degrade", "direction": "outbound", "bandwidth_mbit_s": 8},
            "NetworkChaos",
            {
                "action": "bandwidth",
                "direction": "to",
                "bandwidth": {"rate": "8mbps", "limit": 20971520, "buffer": 10000},
                "target": None,
            },
        ),
    ]  # fmt: skip
    for extra, kind, expected in cases:
        fault = {"at": "1s", "duration": "30s", **extra}
        _, during = _round_trip(env, fault, tmp_path)
        assert [k for k, _ in during] == [kind], extra
        spec = _spec_of(env, kind)
        assert {k: spec.get(k) for k in expected} == expected, extra
        # Chaos Mesh recovers by itself well after rsdrill's revert time if rsdrill died.
        assert spec["duration"] == "150s", extra


def test_network_partition_halves_cuts_the_minority_from_the_majority(
    env: Env, tmp_path: Path
) -> None:
    """Five members: mongo-0 and the first other make the minority; NetworkChaos cuts the
    one side (its selector) from the other (its target), both ways."""
    fault = {"at": "1s", "duration": "30s", "kind": "network-partition", "shape": "halves"}
    _, during = _round_trip(env, fault, tmp_path, members=5)
    assert [k for k, _ in during] == ["NetworkChaos"]
    spec = _spec_of(env, "NetworkChaos")
    ns = env.namespace
    assert spec["action"] == "partition" and spec["direction"] == "both"
    assert spec["selector"] == {"pods": {ns: ["mongo-0", "mongo-1"]}}
    far = {"pods": {ns: ["mongo-2", "mongo-3", "mongo-4"]}}
    assert spec["target"] == {"mode": "all", "selector": far}


K8S_PARTITION = """\
name: k8s-partition
target:
  platform: kubernetes
  uri: mongodb://db1:27017/?replicaSet=rs0
  kubernetes: {{}}
faults:
  - {{at: 5s, kind: network-partition, duration: 20s, {extra}}}
"""


def test_ring_and_flapping_partitions_are_refused_when_loaded() -> None:
    """One NetworkChaos cuts two sides: a ring (one per member) and flapping (a schedule of
    them) are refused at their field, before anything connects to a cluster."""
    for extra, field, said in [
        ("shape: ring", "shape", "shape ring on kubernetes: not available"),
        ("flapping: 5s", "flapping", "flapping on kubernetes: not available"),
    ]:
        text = K8S_PARTITION.format(extra=extra)
        with pytest.raises(ExperimentError) as refused:
            load_experiment_text(text, "partition.yaml")
        column = text.splitlines()[6].index(extra) + len(f"{field}: ") + 1  # at its value
        assert str(refused.value).startswith(
            f"partition.yaml:7:{column}: faults[0].{field}: {said}"
        ), str(refused.value)
    assert load_experiment_text(K8S_PARTITION.format(extra="shape: halves"), "p.yaml")


K8S_FAULT = """\
name: k8s-gray
target:
  platform: kubernetes
  uri: mongodb://db1:27017/?replicaSet=rs0
  kubernetes: {{}}
faults:
  - {{at: 5s, kind: {kind}, duration: 20s{extra}}}
"""


def test_what_the_new_kinds_cannot_do_is_refused_when_loaded() -> None:
    """TimeChaos has no drift; a stress is an approximation the fault must accept; disk-fill
    is Litmus's. Each refused at its field (exit 2 from `rsdrill validate`)."""
    cases = [
        ("clock-skew", ", clock_drift: 0.1", "k.yaml:7:60: faults[0].clock_drift: Chaos Mesh "
         "TimeChaos moves the clock by a fixed offset: drop `clock_drift`"),
        ("cpu-starve", "", "k.yaml:7:20: faults[0].kind: an approximation (cpu-starve on "
         "kubernetes (engine chaos-mesh): Chaos Mesh StressChaos"),
        ("memory-pressure", "", "k.yaml:7:20: faults[0].kind: an approximation ("
         "memory-pressure on kubernetes (engine chaos-mesh)"),
        ("disk-fill", ", engine: chaos-mesh", "k.yaml:7:54: faults[0].engine: disk-fill with "
         "engine chaos-mesh: not available (use litmus)"),
    ]  # fmt: skip
    for kind, extra, said in cases:
        with pytest.raises(ExperimentError) as refused:
            load_experiment_text(K8S_FAULT.format(kind=kind, extra=extra), "k.yaml")
        assert str(refused.value).startswith(said), str(refused.value)
    loaded = load_experiment_text(K8S_FAULT.format(kind="disk-fill", extra=", approximate: true"))
    assert loaded.faults[0].kind == "disk-fill"


def test_time_and_stress_chaos_round_trips(env: Env, tmp_path: Path) -> None:
    """clock-skew as a TimeChaos, cpu-starve and memory-pressure as StressChaos sized from the
    container's limits, each as the API server stored it (its CRD's defaults filled in)."""
    cases = [
        ("mongo", {"kind": "clock-skew", "clock_offset": -90.5}, "TimeChaos",
         {"timeOffset": "-90500ms", "clockIds": ["CLOCK_REALTIME"], "containerNames": ["mongod"]}),
        # 1500m counts as 2 CPUs, each shared with 3 workers: a busy mongod thread keeps 1/4.
        ("mongo", {"kind": "cpu-starve", "cpu_share": 0.25}, "StressChaos",
         {"stressors": {"cpu": {"workers": 6, "load": 100}}, "containerNames": ["mongod"]}),
        # No CPU limit: one CPU's worth, 19 workers for the default 5 %.
        (UNLIMITED, {"kind": "cpu-starve"}, "StressChaos",
         {"stressors": {"cpu": {"workers": 19, "load": 100}}}),
        # 512Mi less 64 MiB; oomScoreAdj is the CRD's default, filled in by the API server.
        ("mongo", {"kind": "memory-pressure", "memory_limit_mb": 64}, "StressChaos",
         {"stressors": {"memory": {"workers": 1, "size": f"{448 * MIB}B", "oomScoreAdj": 0}}}),
    ]  # fmt: skip
    for set_name, extra, kind, expected in cases:
        fault = {"at": "1s", "duration": "30s", **extra}
        injector, during = _round_trip(env, fault, tmp_path, set_name=set_name)
        assert [k for k, _ in during] == [kind], extra
        spec = _spec_of(env, kind)
        assert {k: spec.get(k) for k in expected} == expected, extra
        assert spec["selector"] == {"pods": {env.namespace: [f"{set_name}-0"]}}, extra
        assert spec["mode"] == "all" and spec["duration"] == "150s", extra
        assert kind in injector.describe() and f"on pod {set_name}-0" in injector.describe()
    assert injector.describe().endswith("(memory workers 1 size 469762048B) on pod mongo-0")


def test_stress_workers_stop_at_stress_ng_s_bound_which_the_crd_enforces(
    env: Env, tmp_path: Path
) -> None:
    fault = {"at": "1s", "duration": "30s", "kind": "cpu-starve", "cpu_share": 0.0001}
    target = env.target([fault], tmp_path)
    injector = pod_injector(target, target.faults[0], member(env.namespace, 0))
    assert "(cpu workers 8192 load 100)" in injector.describe()
    assert injector.body["spec"]["stressors"]["cpu"]["workers"] == MAX_STRESS_WORKERS
    # Uncapped, 2 CPUs x 9999 workers: the StressChaos CRD refuses it with its own message.
    over = copy.deepcopy(injector.body)
    over["metadata"]["name"] += "-over"
    over["spec"]["stressors"]["cpu"]["workers"] = 19998
    kube = KubeClient(ClusterAccess(str(env.kube.admin)))
    try:
        with pytest.raises(KubeError) as refused:
            kube.create(STRESS_CHAOS, env.namespace, over)
    finally:
        kube.close()
    assert refused.value.status == 422
    assert "spec.stressors.cpu.workers: Invalid value: 19998" in str(refused.value)
    assert "should be less than or equal to 8192" in str(refused.value)
    injector.inject()
    assert injector.verify(5.0)
    injector.revert()
    assert rsdrill_objects(env.kube.api, env.namespace) == []
    target.teardown()


def test_memory_pressure_needs_a_memory_limit_above_what_the_member_keeps(
    env: Env, tmp_path: Path
) -> None:
    """Without a limit the stress would press the node's memory, not the member's: refused
    when the injector is made, naming the member and pod; nothing is created."""
    cases = [
        (UNLIMITED, {}, "the container has no memory limit: stress would press the node's "
         "memory, not the member's (set resources.limits.memory)"),
        ("mongo", {"memory_limit_mb": 512}, "memory_limit_mb 512 is not below the container's "
         "memory limit (512 MiB): nothing to take"),
    ]  # fmt: skip
    for set_name, extra, said in cases:
        fault = {"at": "1s", "duration": "30s", "kind": "memory-pressure", **extra}
        target = env.target([fault], tmp_path)
        host = member(env.namespace, 0, set_name)
        with pytest.raises(InjectionError) as refused:
            pod_injector(target, target.faults[0], host)
        where = f"{host} (pod {env.namespace}/{set_name}-0)"
        assert str(refused.value) == f"memory-pressure of {where}: {said}"
    assert rsdrill_objects(env.kube.api, env.namespace) == []


def test_litmus_disk_fill_of_the_member_container(env: Env, tmp_path: Path) -> None:
    fault = {"at": "1s", "kind": "disk-fill", "fill_percent": 80.4, "duration": "1s"}
    target = env.target([fault], tmp_path)
    injector = pod_injector(target, target.faults[0], member(env.namespace, 1))
    assert "(disk-fill) on pod mongo-1" in injector.describe()
    experiment_spec = injector.body["spec"]["experiments"][0]
    assert experiment_spec["name"] == "disk-fill"
    env_vars = {e["name"]: e["value"] for e in experiment_spec["spec"]["components"]["env"]}
    assert env_vars == {"TOTAL_CHAOS_DURATION": "1", "TARGET_PODS": "mongo-1",
                        "TARGET_CONTAINER": "mongod", "FILL_PERCENTAGE": "80"}  # fmt: skip
    # Litmus reads its env as strings: the ChaosEngine CRD refuses a number.
    numeric = copy.deepcopy(injector.body)
    numeric["metadata"]["name"] += "-numeric"
    numeric["spec"]["experiments"][0]["spec"]["components"]["env"][-1]["value"] = 80
    kube = KubeClient(ClusterAccess(str(env.kube.admin)))
    try:
        with pytest.raises(KubeError, match="value in body must be of type string"):
            kube.create(CHAOS_ENGINE, env.namespace, numeric)
    finally:
        kube.close()
    done, during = _round_trip(env, fault, tmp_path, host_index=1)
    assert [k for k, _ in during] == ["ChaosEngine"]
    assert done.report()["litmus"]["verdict"] == "Pass"


@pytest.mark.parametrize(
    ("shape", "experiment", "variables"),
    [
        ({"latency": "250ms", "jitter": "20ms"}, "pod-network-latency",
         {"NETWORK_LATENCY": "250", "JITTER": "20"}),
        ({"latency": "3ms"}, "pod-network-latency", {"NETWORK_LATENCY": "3", "JITTER": "0"}),
        ({"loss": 0.05}, "pod-network-loss", {"NETWORK_PACKET_LOSS_PERCENTAGE": "5"}),
        ({"duplicate": 0.125}, "pod-network-duplication",
         {"NETWORK_PACKET_DUPLICATION_PERCENTAGE": "12.5"}),
        ({"corrupt": 0.01}, "pod-network-corruption",
         {"NETWORK_PACKET_CORRUPTION_PERCENTAGE": "1"}),
    ],
)  # fmt: skip
def test_litmus_network_degrade_runs_the_pod_network_experiment_of_its_field(
    env: Env, tmp_path: Path, shape: dict[str, Any], experiment: str, variables: dict[str, str]
) -> None:
    """One netem field, one Litmus experiment, on what the member's pod sends to everything
    (between all): its variables are the ones the upstream ChaosExperiment declares, as
    strings the ChaosEngine CRD accepts; the engine runs, its verdict is read, it is deleted."""
    fault = {"at": "1s", "kind": "network-degrade", "engine": "litmus", "duration": "1s",
             "direction": "outbound", **shape}  # fmt: skip
    target = env.target([fault], tmp_path)
    injector = pod_injector(target, target.faults[0], member(env.namespace, 2))
    assert f"({experiment}) on pod mongo-2" in injector.describe()
    run = injector.body["spec"]["experiments"][0]
    assert run["name"] == experiment
    sent = {e["name"]: e["value"] for e in run["spec"]["components"]["env"]}
    assert sent == {"TOTAL_CHAOS_DURATION": "1", "TARGET_PODS": "mongo-2",
                    "TARGET_CONTAINER": "mongod", "NETWORK_INTERFACE": "eth0",
                    **variables}  # fmt: skip
    installed = KubeClient(ClusterAccess(str(env.kube.admin)))
    try:
        declared = installed.get(CHAOS_EXPERIMENT, env.namespace, experiment)
    finally:
        installed.close()
    assert declared is not None
    assert set(sent) <= {e["name"] for e in declared["spec"]["definition"]["env"]}
    done, during = _round_trip(env, fault, tmp_path, host_index=2)
    assert [k for k, _ in during] == ["ChaosEngine"]
    assert done.report()["litmus"]["verdict"] == "Pass"


def test_litmus_network_degrade_between_members_names_the_other_members(
    env: Env, tmp_path: Path
) -> None:
    """between: members limits the experiment to the other members' addresses, every other
    member's (one outside the cluster too): IP addresses as DESTINATION_IPS, names as
    DESTINATION_HOSTS (the experiment resolves them, as mongod does)."""
    fault = {"at": "1s", "kind": "network-degrade", "engine": "litmus", "duration": "1s",
             "direction": "outbound", "between": "members", "loss": 0.2,
             "kubernetes": {"network_interface": "net1"}}  # fmt: skip
    target = env.target([fault], tmp_path)
    target.members = [*target.members, "10.9.8.7:27017"]
    injector = pod_injector(target, target.faults[0], member(env.namespace, 1))
    run = injector.body["spec"]["experiments"][0]
    sent = {e["name"]: e["value"] for e in run["spec"]["components"]["env"]}
    others = f"{member(env.namespace, 0)},{member(env.namespace, 2)}".replace(":27017", "")
    assert (sent["NETWORK_INTERFACE"], sent["DESTINATION_IPS"], sent["DESTINATION_HOSTS"]) == (
        "net1",
        "10.9.8.7",
        others,
    )
    injector.inject()
    assert injector.verify(5.0), injector.describe()
    injector.revert()
    assert rsdrill_objects(env.kube.api, env.namespace) == []
    alone = env.target([fault], tmp_path, members=1)
    with pytest.raises(InjectionError, match="the set has no other member"):
        pod_injector(alone, alone.faults[0], member(env.namespace, 0))


def test_recover_deletes_leftover_time_stress_and_disk_fill_objects(
    env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run killed with its TimeChaos, StressChaos and Litmus disk-fill in force: `rsdrill
    recover` deletes each from the journal alone (after Chaos Mesh and Litmus let go)."""
    from typer.testing import CliRunner

    faults = [
        {"at": "1s", "duration": "60s", "kind": "clock-skew"},
        {"at": "1s", "duration": "60s", "kind": "cpu-starve"},
        {"at": "1s", "duration": "60s", "kind": "memory-pressure"},
        {"at": "1s", "duration": "60s", "kind": "disk-fill"},
    ]
    target = env.target(faults, tmp_path)
    monkeypatch.setenv("RSDRILL_HOME", str(tmp_path / "home"))
    journal = Journal.open_run("killed-k8s", "k8s-gray-faults")
    for i, fault in enumerate(target.faults):
        host = member(env.namespace, i % 2)
        injector = pod_injector(target, fault, host)
        journal.write("intent", key=f"fault:{i}", kind=fault.kind, target=host,
                      revert=injector.revert_action())  # fmt: skip
        injector.inject()
        journal.write("applied", key=f"fault:{i}")
    journal.close()
    target.teardown()
    left = rsdrill_objects(env.kube.api, env.namespace)
    assert sorted(k for k, _ in left) == ["ChaosEngine", "StressChaos", "StressChaos", "TimeChaos"]
    # The journal's pid is this (living) process: --force says it is dead all the same.
    recovered = CliRunner().invoke(app, ["recover", "--force"])
    assert recovered.exit_code == 0, recovered.output
    for kind, name in left:
        assert f"{kind} {env.namespace}/{name} deleted (its fault recovered)" in recovered.output
    assert rsdrill_objects(env.kube.api, env.namespace) == []
    assert "nothing to recover" in CliRunner().invoke(app, ["recover"]).output


def test_the_plan_shows_the_new_kinds_resources(env: Env) -> None:
    """`rsdrill plan`'s YAML for them, before any pod is read: the memory size a placeholder."""
    exp = experiment(env.kube.admin, env.namespace, [
        {"at": "1s", "duration": "60s", "kind": "clock-skew", "clock_offset": 30},
        {"at": "1s", "duration": "60s", "kind": "memory-pressure"},
        {"at": "1s", "duration": "60s", "kind": "disk-fill"},
    ])  # fmt: skip
    plan = "\n".join(plan_details(exp))
    assert "kind: TimeChaos" in plan and "timeOffset: 30s" in plan
    assert "kind: StressChaos" in plan
    assert f"size: <the container's memory limit less {MIB}B>" in plan
    assert "sized from container mongod's limits in its pod" in plan
    assert "kind: ChaosEngine" in plan and "- name: disk-fill" in plan
    assert "name: FILL_PERCENTAGE\n" in plan


def test_iops_throttle_uses_block_chaos_where_installed(env: Env, tmp_path: Path) -> None:
    fault = {"at": "1s", "kind": "iops-throttle", "iops": 200, "duration": "10s"}
    _, during = _round_trip(env, fault, tmp_path)  # Chaos Mesh installs every CRD
    assert [k for k, _ in during] == ["BlockChaos"]
    spec = _spec_of(env, "BlockChaos")
    assert spec["delay"]["latency"] == "5ms" and spec["volumeName"] == "data"
    never = {**fault, "kubernetes": {"block_chaos": "never"}}
    _, during = _round_trip(env, never, tmp_path)
    assert [k for k, _ in during] == ["IOChaos"]


def test_native_pod_delete(env: Env, tmp_path: Path) -> None:
    uid_before = _uid(env, "mongo-1")
    injector, during = _round_trip(
        env, {"at": "1s", "kind": "host-kill", "duration": "5s"}, tmp_path, host_index=1
    )
    assert during == [] and injector.revert_action() is None
    assert "delete pod" in injector.describe()
    assert _uid(env, "mongo-1") != uid_before


def test_litmus_pod_delete_reads_the_verdict(env: Env, tmp_path: Path) -> None:
    uid_before = _uid(env, "mongo-2")
    injector, during = _round_trip(
        env,
        {"at": "1s", "kind": "host-kill", "engine": "litmus", "duration": "1s"},
        tmp_path,
        host_index=2,
    )
    assert [k for k, _ in during] == ["ChaosEngine"]
    report = injector.report()["litmus"]
    assert report["verdict"] == "Pass" and report["probe_success_percentage"] == 100.0
    assert report["probes"] == [
        {"name": "rsdrill-pod-back", "type": "k8sProbe", "mode": "EOT", "verdict": "Passed"}
    ]
    assert _uid(env, "mongo-2") != uid_before


def test_litmus_node_drain_names_the_node(env: Env, tmp_path: Path) -> None:
    fault = {"at": "1s", "kind": "host-kill", "engine": "litmus", "scope": "node", "duration": "1s"}
    target = env.target([fault], tmp_path)
    injector = pod_injector(target, target.faults[0], member(env.namespace, 1))
    assert "(node-drain) on node " + env.nodes[1] in injector.describe()
    experiment_spec = injector.body["spec"]["experiments"][0]
    assert experiment_spec["name"] == "node-drain"
    env_vars = {e["name"]: e["value"] for e in experiment_spec["spec"]["components"]["env"]}
    assert env_vars == {"TOTAL_CHAOS_DURATION": "1", "TARGET_NODE": env.nodes[1]}
    _, during = _round_trip(env, fault, tmp_path, host_index=1)
    assert [k for k, _ in during] == ["ChaosEngine"]


def test_litmus_experiment_missing_is_named(env: Env, tmp_path: Path) -> None:
    fault = {
        "at": "1s",
        "kind": "host-kill",
        "engine": "litmus",
        "duration": "1s",
        "kubernetes": {"litmus_experiment": "pod-network-partition"},
    }
    target = env.target([fault], tmp_path)
    injector = pod_injector(target, target.faults[0], member(env.namespace, 0))
    with pytest.raises(InjectionError, match="experiment pod-network-partition is not installed"):
        injector.inject()
    assert rsdrill_objects(env.kube.api, env.namespace) == []


def test_chaos_mesh_reports_nothing_selected(env: Env, tmp_path: Path) -> None:
    from kubernetes import client

    freeze = {"at": "1s", "kind": "host-freeze", "engine": "chaos-mesh", "duration": "5s"}
    target = env.target([freeze], tmp_path, members=PODS)
    injector = pod_injector(target, target.faults[0], member(env.namespace, PODS - 1))
    # The pod goes between the lookup and the injection (its StatefulSet scaled down; a pod
    # merely deleted would be re-created at once): Chaos Mesh selects nothing.
    apps = client.AppsV1Api(env.kube.api)
    apps.patch_namespaced_stateful_set_scale(
        "mongo", env.namespace, {"spec": {"replicas": PODS - 1}}
    )
    last = f"mongo-{PODS - 1}"
    try:
        _wait(lambda: _uid(env, last) is None)
        injector.inject()
        try:
            with pytest.raises(InjectionError, match="selected no pod"):
                injector.verify(2.0)
        finally:
            injector.revert()
    finally:
        apps.patch_namespaced_stateful_set_scale(
            "mongo", env.namespace, {"spec": {"replicas": PODS}}
        )
    assert rsdrill_objects(env.kube.api, env.namespace) == []
    _wait(lambda: _uid(env, last) is not None)


def test_member_without_pod_is_refused(env: Env, tmp_path: Path) -> None:
    freeze = {"at": "1s", "kind": "host-freeze", "duration": "5s"}
    target = env.target([freeze], tmp_path, selector="app=mongo")
    with pytest.raises(InjectionError, match="none of the pods matching app=mongo"):
        pod_injector(target, target.faults[0], "mongo-9.mongo.elsewhere.svc:27017")
    # No member has a pod: refused before anything is injected.
    with pytest.raises(TargetError, match="selector app=cassandra matches no pod"):
        env.target([freeze], tmp_path, selector="app=cassandra")
    with pytest.raises(TargetError, match=f"pod mongo-0x not found in namespace {env.namespace}"):
        env.target(
            [freeze], tmp_path, pods={member(env.namespace, i): f"mongo-{i}x" for i in range(3)}
        )
    assert rsdrill_objects(env.kube.api, env.namespace) == []


def _uid(env: Env, name: str) -> str | None:
    from kubernetes.client.rest import ApiException

    try:
        return str(env.core().read_namespaced_pod(name, env.namespace).metadata.uid)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def _wait(check: Any, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)
