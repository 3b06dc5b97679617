"""A sharded cluster rsdrill did not build, on the real API server: every member of the
existing_cluster fixture (config servers, two rs3 shards) is a pod of a real StatefulSet and each
router a pod of a real Deployment, all named in an explicit pod map. The bindings are
test_kube_e2e's: a pod's deletion kills its process, the real StatefulSet or ReplicaSet
controller re-creates the pod and the process starts again. `rsdrill run` finds the cluster
from the routers' URI, and its faults act on pods only (Chaos Mesh's PodChaos, or a pod deleted
natively)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from rsdrill.connection import ConnectOptions, answers_hello
from rsdrill.engine.check import check_experiment
from rsdrill.experiment.schema import Experiment
from rsdrill.platforms.base import InjectionError, TargetError
from rsdrill.platforms.kubernetes.target import KubernetesTarget
from rsdrill.result import Result
from rsdrill.sandbox.cluster import Sandbox
from rsdrill.sandbox.config import CONFIG_SET
from rsdrill.sandbox.sharded import ShardedSandbox
from tests.harness import sharded_cluster as cluster
from tests.harness.cli import rsdrill_run
from tests.harness.injectors import pod_injector
from tests.harness.members import wait_until
from tests.kubernetes.cluster import REPO, env_without_kube
from tests.kubernetes.conftest import Kube
from tests.kubernetes.controllers import ChaosObjects
from tests.kubernetes.kubelet import Kubelet
from tests.kubernetes.support import make_node, make_statefulset, rsdrill_objects, wait_running

PROBES = {"availability": {"interval": "20ms", "timeout": "250ms", "retries": True}}
SHARD1_PRIMARY = {"shard": "shard1", "role": "primary"}
ROUTERS = "mongos"  # the routers' Deployment


@dataclass
class BoundCluster:
    """The existing cluster with a pod on the real API server per member and per router."""

    directory: Path
    namespace: str
    sets: dict[str, list[str]]  # set name → its members (the config servers' first)
    routers: list[str]
    pods: dict[str, str]  # host:port (member or router) → pod
    kubelet: Kubelet
    mesh: ChaosObjects
    gone: list[str]  # pods whose process the harness's kubelet stopped, in order
    back: list[str]  # pods (re-)created since, their process started again
    router_of: dict[str, str]  # each router pod now → the router it runs

    def spec(self, kube: Kube, faults: list[dict[str, Any]], **changes: Any) -> dict[str, Any]:
        target = {
            "platform": "kubernetes",
            "topology": "sharded",
            "uri": cluster.uri(self.directory),
            "kubernetes": {
                "kubeconfig": str(kube.admin),
                "namespace": self.namespace,
                "wait": "10s",
                "pods": changes.pop("pods", self.pods),
            },
        }
        return {"name": "k8s-sharded-found", "target": target, "probes": PROBES,
                "faults": faults, "observe": {"after_revert": "5s"}, **changes}  # fmt: skip

    def uid(self, kube: Kube, pod: str) -> str:
        from kubernetes import client

        core: Any = client.CoreV1Api(kube.api)
        return str(core.read_namespaced_pod(pod, self.namespace).metadata.uid)


@pytest.fixture
def bound_cluster(kube: Kube, existing_cluster: Path) -> Iterator[BoundCluster]:
    namespace = kube.namespace("sharded")
    node = f"{namespace}-node"
    make_node(kube.api, node)
    directory = existing_cluster
    sharded = ShardedSandbox(directory)
    sets = cluster.sets(directory)
    routers = cluster.routers(directory)
    pods: dict[str, str] = {}
    for name, hosts in sets.items():
        stem = "cfg" if name == CONFIG_SET else name
        pods.update({host: f"{stem}-{i}" for i, host in enumerate(hosts)})
    by_pod = {pod: host for host, pod in pods.items()}
    set_dirs = {host: sharded.spec.set_dir(directory, name)
                for name, hosts in sets.items() for host in hosts}  # fmt: skip
    router_of: dict[str, str] = {}  # a router's pod → the router it runs (pods come and go)
    gone: list[str] = []
    back: list[str] = []

    def on_stop(pod: str) -> None:
        gone.append(pod)
        if pod in router_of:
            sharded.kill_router(router_of.pop(pod))
        else:
            member_set = Sandbox(set_dirs[by_pod[pod]])
            member_set.kill(member_set.spec.member(by_pod[pod]))

    def on_start(pod: str) -> None:
        if pod.startswith(f"{ROUTERS}-"):  # a new pod of the Deployment runs a router none runs
            router_of[pod] = next(r for r in routers if r not in router_of.values())
            sharded.restart_router(router_of[pod])  # (the routers run before their pods)
        else:
            member_set = Sandbox(set_dirs[by_pod[pod]])
            if member_set.pid(member := member_set.spec.member(by_pod[pod])) is None:
                member_set.start(member)
        back.append(pod)

    kubelet = Kubelet(kube.api, namespace, on_start=on_start, on_stop=on_stop)
    mesh = ChaosObjects(kube.api, namespace)
    loops = [kubelet.start(), mesh.start()]
    try:
        for name, hosts in sets.items():
            make_statefulset(kube.api, namespace, [node] * len(hosts),
                             name="cfg" if name == CONFIG_SET else name)  # fmt: skip
        _make_routers(kube.api, namespace, node, len(routers))
        wait_running(kube.api, namespace, list(by_pod))
        wait_until(lambda: len(router_of) == len(routers), 60, "the routers' pods running")
        pods.update({host: pod for pod, host in router_of.items()})
        back.clear()
        yield BoundCluster(
            directory, namespace, sets, routers, pods, kubelet, mesh, gone, back, router_of
        )
    finally:
        for loop in loops:  # before the cluster goes down: the kubelet would restart it
            loop.stop()
    assert not kubelet.errors and not mesh.errors, kubelet.errors + mesh.errors


def _make_routers(api: Any, namespace: str, node: str, replicas: int) -> None:
    """The routers as a Deployment (its ReplicaSet names each pod anew), on `node`."""
    from kubernetes import client

    labels = {"app": ROUTERS}
    client.AppsV1Api(api).create_namespaced_deployment(namespace, {
        "metadata": {"name": ROUTERS},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"nodeSelector": {"kubernetes.io/hostname": node},
                         "containers": [{"name": "mongos", "image": "mongo:7.0"}]},
            },
        },
    })  # fmt: skip


def _run(bound: BoundCluster, kube: Kube, tmp: Path, faults: list[dict[str, Any]]) -> Result:
    """`rsdrill run` of the experiment as a nightly job starts it; its result.json."""
    path = tmp / "experiment.yaml"
    path.write_text(yaml.safe_dump(bound.spec(kube, faults), sort_keys=False))
    out = tmp / "out"
    env = {**env_without_kube(), "RSDRILL_HOME": str(tmp / "home")}
    done = rsdrill_run(
        ["run", str(path), "--out", str(out),
         "--no-live", "--no-history", "--yes"],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=180, check=False,
    )  # fmt: skip
    said = done.stdout + done.stderr
    assert (out / "result.json").exists(), said
    result = Result.from_json((out / "result.json").read_text())
    assert done.returncode == 0 and result.verdict == "pass", f"{result.error}\n{said}"
    return result


def _wait_back(bound: BoundCluster, pods: list[str]) -> None:
    """Every pod in `pods` re-created and its process started again."""
    wait_until(lambda: all(p in bound.back for p in pods), 60, f"{pods} re-created")


@pytest.mark.slow
def test_chaos_mesh_kills_a_shard_primarys_pod(
    kube: Kube, bound_cluster: BoundCluster, tmp_path: Path
) -> None:
    """PodChaos pod-kill of shard1's primary: shard1 fails over to another of its members,
    shard0's writes carry on, and every member of every set was found from the routers."""
    bound = bound_cluster
    kill = {"at": "2s", "kind": "host-kill", "engine": "chaos-mesh", "select": SHARD1_PRIMARY,
            "duration": "3s"}  # fmt: skip
    started = time.monotonic()
    result = _run(bound, kube, tmp_path, [kill])
    print(f"run: {time.monotonic() - started:.1f}s")
    sets = bound.sets
    assert sorted(result.target.members) == sorted(h for hosts in sets.values() for h in hosts)
    [fault] = result.faults
    killed = fault.target
    assert fault.kind == "host-kill" and fault.verified_at_s is not None
    assert killed in sets["shard1"] and fault.detail["role"] == "PRIMARY", fault.detail
    # The PodChaos named the killed member's pod alone, and only that pod went.
    chaos = [o for o in bound.mesh.seen if o["kind"] == "PodChaos"]
    assert [o["spec"]["selector"]["pods"] for o in chaos] == [
        {bound.namespace: [bound.pods[killed]]}
    ]
    assert bound.gone == [bound.pods[killed]]
    shard0, shard1 = result.metrics.shards["shard0"], result.metrics.shards["shard1"]
    print(f"shard1: failover {shard1.failover_s}s to {shard1.new_primary}, gap "
          f"{shard1.write_unavailable_s}s; shard0: gap {shard0.write_unavailable_s}s, "
          f"{shard0.writes} writes")  # fmt: skip
    # The StatefulSet re-creates the pod at once: it may win the election its loss called (CI71:
    # the killed member was shard1's new primary, in a new term, 1.33 s after the kill).
    cluster.assert_only_struck_shard_interrupted(result, sets, "shard1", killed,
                                                 killed_may_win=True)  # fmt: skip
    assert rsdrill_objects(kube.api, bound.namespace) == []
    # The pod came back (the real StatefulSet controller) and its member rejoined as a
    # secondary, or is the primary it was elected (CI100: waiting for a secondary timed out).
    _wait_back(bound, [bound.pods[killed]])
    cluster.wait_back_as_secondary(killed, or_primary=shard1.new_primary == killed)


@pytest.mark.slow
def test_a_routers_pod_deleted(kube: Kube, bound_cluster: BoundCluster, tmp_path: Path) -> None:
    """host-kill (native: the pod deleted) of {mongos: 1}: the first router's pod goes, its
    process with it; the real ReplicaSet controller replaces the pod under a new name, and the
    router starts again in it. No member's pod is touched, and each shard's writes go on
    through the other router."""
    bound = bound_cluster
    router = bound.routers[0]
    pod = bound.pods[router]
    sharded = ShardedSandbox(bound.directory)
    pid = sharded.router_pid(router)
    assert pid is not None
    kill = {"at": "2s", "kind": "host-kill", "select": {"mongos": 1}, "duration": "3s"}
    started = time.monotonic()
    result = _run(bound, kube, tmp_path, [kill])
    print(f"run: {time.monotonic() - started:.1f}s (its duration_s {result.duration_s})")
    [fault] = result.faults
    assert fault.kind == "host-kill" and fault.target == router, fault
    assert fault.verified_at_s is not None and fault.injected_at_s is not None
    assert bound.gone == [pod]  # the router's pod alone
    wait_until(lambda: router in bound.router_of.values(), 60, f"a new pod for {router}")
    [replacement] = [p for p, r in bound.router_of.items() if r == router]
    assert replacement != pod and replacement.startswith(f"{ROUTERS}-")  # named anew
    assert sharded.router_pid(router) not in (None, pid)  # a new process
    assert answers_hello(router, 1.0, options=ConnectOptions())
    figures = result.metrics.shards
    print({name: (f.write_unavailable_s, f.writes, f.failover_s) for name, f in figures.items()})
    assert sorted(figures) == ["shard0", "shard1"]
    for name, figure in figures.items():
        assert figure.failover_s is None, name  # no set lost its primary
        assert figure.writes > 50, name
        assert figure.write_unavailable_s is not None and figure.write_unavailable_s < 2.0, name


def test_check_shows_the_cluster_and_an_unmapped_router_is_refused(
    kube: Kube, bound_cluster: BoundCluster, tmp_path: Path
) -> None:
    """`rsdrill check` on the sharded Kubernetes experiment: each set with its members and
    states, the balancer, and the platform's preflight, every line holding. A router left out
    of the explicit pod map: the preflight refuses the router fault that may land on it, naming
    the fault and the router (a shard fault, which cannot, still passes); a map that gives no
    host a pod is refused naming the first host. Nothing is created or deleted."""
    bound = bound_cluster
    kill = {"at": "2s", "kind": "host-kill", "select": {"mongos": 1}, "duration": "3s"}
    checks = check_experiment(Experiment.model_validate(bound.spec(kube, [kill])))
    by_name = {c.name: c for c in checks}
    assert [c for c in checks if c.ok is False] == [], checks
    sets = bound.sets
    assert by_name["shard shard0"].ok and by_name["shard shard0"].detail.count("PRIMARY") == 1
    assert by_name["shard shard1"].ok and by_name["shard shard1"].detail.count("PRIMARY") == 1
    assert all(h in by_name["shard shard1"].detail for h in sets["shard1"])
    assert all(h in by_name["config servers"].detail for h in sets[CONFIG_SET])
    assert by_name["config servers"].ok
    assert by_name["balancer"].detail.startswith("off")
    assert by_name["platform kubernetes"].ok, by_name["platform kubernetes"]
    assert all(by_name[f"reach {router}"].ok for router in bound.routers)

    router = bound.routers[0]
    partial = {h: p for h, p in bound.pods.items() if h != router}
    unmapped = Experiment.model_validate(bound.spec(kube, [kill], pods=partial))
    with pytest.raises(
        TargetError,
        match=rf"preflight refused.*faults\[0\] \(the first router\) "
        rf"may act on {router}: .*{router} is not in target.kubernetes.pods",
    ):
        KubernetesTarget(unmapped, tmp_path).setup()
    shard_kill = {**kill, "select": {"shard": "shard0", "role": "primary"}}
    target = KubernetesTarget(Experiment.model_validate(
        bound.spec(kube, [shard_kill], pods=partial)), tmp_path)  # fmt: skip
    target.setup()  # the unmapped router is out of this fault's reach
    assert target.mapped_hosts[-2:] == bound.routers
    with pytest.raises(InjectionError, match=f"member {router} is not in target.kubernetes.pods"):
        pod_injector(target, target.faults[0], router)
    target.teardown()

    first = sets[CONFIG_SET][0]
    gone = {h: f"{p}-gone" for h, p in bound.pods.items()}
    refused = Experiment.model_validate(bound.spec(kube, [kill], pods=gone))
    with pytest.raises(TargetError, match=f"preflight refused.*member {first}: pod "):
        KubernetesTarget(refused, tmp_path).setup()
    assert rsdrill_objects(kube.api, bound.namespace) == []
    assert bound.gone == []
