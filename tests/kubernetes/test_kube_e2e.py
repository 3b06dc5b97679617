"""Whole `rsdrill run`s of the Kubernetes experiment files, measured end to end: the pods of a
real StatefulSet are bound to sandbox members (a pod's deletion kills its member; the real
StatefulSet controller re-creates the pod, the real scheduler places it, and the member
restarts); Chaos Mesh's real controller-manager (and the Litmus stand-in) carry out the chaos
objects rsdrill creates.
Only the target section is swapped for the harness's (connection string, kubeconfig, pod map);
probes and SLOs are the file's, and faults too unless a test shortens them."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from rsdrill.connection import ConnectOptions
from rsdrill.sandbox.cluster import EmulatorEngine, up
from rsdrill.sandbox.config import Settings, build_topology
from rsdrill.states import member_state
from tests.harness.members import wait_until
from tests.harness.processes import kill_after_line, python_named
from tests.harness.sharded_cluster import wait_back_as_secondary
from tests.kubernetes.bound import EXPERIMENT, BoundSet, aimed, file_run, rsdrill_cli, run_file
from tests.kubernetes.cluster import REPO
from tests.kubernetes.conftest import Kube
from tests.kubernetes.controllers import ChaosObjects, LitmusOperator
from tests.kubernetes.kubelet import ContainerRuntime
from tests.kubernetes.support import (
    make_pod,
    node_agent,
    rsdrill_objects,
    service_account_token,
)

LITMUS_EXPERIMENT = REPO / "experiments" / "k8s-rs3-litmus-pod-delete.yaml"
RS1_EXPERIMENT = REPO / "experiments" / "k8s-rs1-pod-kill.yaml"
DRAIN_EXPERIMENT = REPO / "experiments" / "k8s-rs3-node-drain.yaml"


def _passed(
    kube: Kube, bound_set: BoundSet, tmp_path: Path, faults: list[dict[str, Any]], **changes: Any
) -> list[dict[str, Any]]:
    """`rsdrill run` of the bound set with `faults` (and no SLO): its faults, once it passed."""
    path = bound_set.experiment(kube, tmp_path, faults=faults, slo={}, **changes)
    run = run_file(path, tmp_path / "out", tmp_path / "home")
    output, _ = run.communicate(timeout=240)
    assert run.returncode == 0, output
    result: list[dict[str, Any]] = json.loads((tmp_path / "out" / "result.json").read_text())[
        "faults"
    ]
    return result


@pytest.mark.slow
def test_pod_kill_run_measures_a_failover(kube: Kube, bound_set: BoundSet, tmp_path: Path) -> None:
    path = bound_set.experiment(kube, tmp_path)
    out = tmp_path / "out"
    run = run_file(path, out, tmp_path / "home")
    output, _ = run.communicate(timeout=240)
    assert run.returncode == 0, output
    result = json.loads((out / "result.json").read_text())
    assert result["verdict"] == "pass"
    [fault] = result["faults"]
    assert fault["kind"] == "host-kill" and fault["verified_at_s"] is not None
    assert "PodChaos" in fault["detail"]["plan"]
    failover = result["metrics"]["failover_s"]
    assert failover is not None and 0 < failover <= 12.7
    assert result["metrics"]["lost_acknowledged_writes"] == 0
    killed = [o for o in bound_set.mesh.seen if o["kind"] == "PodChaos"]
    namespace = bound_set.namespace
    assert [o["spec"]["selector"]["pods"][namespace] for o in killed] == [
        [bound_set.pods[fault["target"]]]
    ]
    assert rsdrill_objects(kube.api, namespace) == []


@pytest.mark.slow
@pytest.mark.parametrize("bound_set", [{"topology": "rs1"}], indirect=True)
def test_rs1_pod_kill_lasts_until_the_statefulset_has_the_pod_back(
    kube: Kube, bound_set: BoundSet, tmp_path: Path
) -> None:
    """experiments/k8s-rs1-pod-kill.yaml (its fault at 2 s, kept 5 s): Chaos Mesh kills the
    only member's pod; writes stop until the real StatefulSet controller has re-created the
    pod, the real scheduler has put it on its volume's node and the member is primary again:
    the write gap covers the pod's absence, within the file's SLO."""
    result = file_run(kube, bound_set, tmp_path, RS1_EXPERIMENT, at="2s", duration="5s")
    [(pod, absent_s)] = bound_set.kubelet.absences
    gap = result["metrics"]["write_unavailable_s"]
    print(f"pod {pod} absent {absent_s:.2f}s; write gap {gap:.2f}s")
    assert pod == "mongo-0" and gap is not None and absent_s <= gap <= 120, (absent_s, gap)


@pytest.mark.slow
def test_node_drain_fails_over_and_the_pod_waits_for_its_volumes_node(
    kube: Kube, bound_set: BoundSet, tmp_path: Path
) -> None:
    """experiments/k8s-rs3-node-drain.yaml (its fault at 2 s, kept 4 s): the primary's node is
    drained through the eviction API and its Node deleted; the set fails over within the
    file's SLO. The real StatefulSet controller re-creates the pod at once and the real
    scheduler leaves it Pending: its local volume is on the node that is gone."""
    from kubernetes import client

    result = file_run(kube, bound_set, tmp_path, DRAIN_EXPERIMENT, at="2s", duration="4s")
    [fault] = result["faults"]
    pod = bound_set.pods[fault["target"]]
    node = f"{bound_set.namespace}-node-{pod.rsplit('-', 1)[1]}"
    assert f"drain node {node}" in fault["detail"]["plan"], fault["detail"]
    failover = result["metrics"]["failover_s"]
    print(f"failover {failover}s, write gap {result['metrics']['write_unavailable_s']}s")
    assert failover is not None and 0 < failover <= 12.7
    core = client.CoreV1Api(kube.api)
    assert node not in {n.metadata.name for n in core.list_node().items}
    replacement = core.read_namespaced_pod(pod, bound_set.namespace)
    assert replacement.status.phase == "Pending" and not replacement.spec.node_name
    [scheduled] = [c for c in replacement.status.conditions if c.type == "PodScheduled"]
    assert scheduled.reason == "Unschedulable", scheduled
    volume = core.read_persistent_volume(f"{bound_set.namespace}-{pod}")
    [term] = volume.spec.node_affinity.required.node_selector_terms
    assert term.match_expressions[0].values == [node]  # where the pod's data is
    assert pod not in bound_set.kubelet.running


def _ready(core: Any, node: str) -> str:
    [ready] = [c for c in core.read_node(node).status.conditions if c.type == "Ready"]
    return str(ready.status)


@pytest.mark.slow
def test_a_lost_node_is_unreachable_and_its_pod_kept_until_the_node_is_back(
    kube: Kube, bound_set: BoundSet
) -> None:
    """A node dies (its kubelet silent, the primary on it gone): the real node lifecycle
    controller marks it Unknown after its grace period and taints it unreachable; the taint
    eviction controller evicts the pod once its toleration runs out, but with no kubelet to
    confirm, the pod stays, Terminating, and the real StatefulSet controller makes no second one
    (one pod per identity); the set fails over meanwhile. The node back, its kubelet confirms
    the deletion, and the StatefulSet's new pod there brings the member back."""
    from kubernetes import client

    core, namespace = client.CoreV1Api(kube.api), bound_set.namespace
    members = bound_set.sandbox.spec.members
    [primary] = [
        m for m in members if member_state(m.host, 1.0, options=ConnectOptions()) == "PRIMARY"
    ]
    pod = bound_set.pods[primary.host]
    before = core.read_namespaced_pod(pod, namespace)
    node = before.spec.node_name
    # Evicted 2 s after the taint, not the admission default's 300 s (a pod may only shorten
    # its tolerations; users set this for stateful pods).
    unreachable = "node.kubernetes.io/unreachable"
    tolerations = [{"key": t.key, "operator": t.operator, "effect": t.effect,
                    "tolerationSeconds": 2 if t.key == unreachable else t.toleration_seconds}
                   for t in before.spec.tolerations or []]  # fmt: skip
    if not any(t["key"] == unreachable for t in tolerations):
        tolerations.append({"key": unreachable, "operator": "Exists", "effect": "NoExecute",
                            "tolerationSeconds": 2})  # fmt: skip
    core.patch_namespaced_pod(pod, namespace, {"spec": {"tolerations": tolerations}})
    kube.heartbeat.lose(node)
    bound_set.sandbox.kill(primary)
    try:
        wait_until(lambda: _ready(core, node) == "Unknown", 60, f"{node} Unknown")

        def tainted() -> bool:
            taints = {(t.key, t.effect) for t in core.read_node(node).spec.taints or []}
            return (unreachable, "NoExecute") in taints

        wait_until(tainted, 30, f"{node} tainted unreachable")
        wait_until(lambda: core.read_namespaced_pod(pod, namespace).metadata.deletion_timestamp,
                   30, f"{pod} evicted")  # fmt: skip
        others = [m for m in members if m != primary]
        wait_until(lambda: any(member_state(m.host, 1.0, options=ConnectOptions()) == "PRIMARY"
                               for m in others), 30, "a new primary")  # fmt: skip
        time.sleep(3)  # what the StatefulSet controller does meanwhile: nothing
        held = core.read_namespaced_pod(pod, namespace)
        assert held.metadata.uid == before.metadata.uid and held.metadata.deletion_timestamp
        assert len(core.list_namespaced_pod(namespace).items) == len(members)
    finally:
        kube.heartbeat.restore(node)

    def replaced() -> bool:
        now = core.read_namespaced_pod(pod, namespace)
        return now.metadata.uid != before.metadata.uid and now.status.phase == "Running"

    wait_until(replaced, 60, f"{pod} re-created and running")
    assert core.read_namespaced_pod(pod, namespace).spec.node_name == node  # its volume's
    wait_back_as_secondary(primary.host)


@pytest.mark.slow
@pytest.mark.parametrize("bound_set", [{"zones": ["east", "east", "west"]}], indirect=True)
def test_a_zone_is_the_zone_label_of_its_members_nodes(
    kube: Kube, bound_set: BoundSet, tmp_path: Path
) -> None:
    """The members carry no zone tags: a member's zone is its pod's node's
    topology.kubernetes.io/zone. The west zone's pod is the one killed; a zone no node is in
    is refused by the guards, naming the zones there are."""
    kill = [{"at": "2s", "kind": "host-kill", "select": {"zone": "west"}, "duration": "4s"}]
    [fault] = _passed(kube, bound_set, tmp_path, kill)
    west = bound_set.sandbox.spec.members[2].host
    assert fault["target"] == west
    assert bound_set.pods[west] in fault["detail"]["plan"], fault["detail"]
    kill[0]["select"] = {"zone": "north"}
    path = bound_set.experiment(kube, tmp_path, faults=kill, slo={})
    refused = run_file(path, tmp_path / "out2", tmp_path / "home")
    output, _ = refused.communicate(timeout=120)
    assert refused.returncode == 3, output
    assert "no member is in zone north (the members' zones: east, west)" in output, output
    assert json.loads((tmp_path / "out2" / "result.json").read_text())["faults"] == []


@pytest.mark.slow
@pytest.mark.parametrize("bound_set", [{"zones": ["east", "east", "west"]}], indirect=True)
def test_a_zone_killed_stays_down_until_its_nodes_are_uncordoned(
    kube: Kube, bound_set: BoundSet, tmp_path: Path
) -> None:
    """zone-outage way kill drains the west member's node and keeps it cordoned: its pod, whose
    volume is on that node, is re-created by its StatefulSet at once but stays Pending, and
    comes back only once the outage is reverted (6 s)."""
    from kubernetes import client

    kill = [{"at": "2s", "kind": "zone-outage", "way": "kill", "select": {"zone": "west"},
             "duration": "6s"}]  # fmt: skip
    [fault] = _passed(kube, bound_set, tmp_path, kill)
    west = bound_set.sandbox.spec.members[2].host
    assert fault["target"] == west and fault["reverted_at_s"] is not None, fault
    node = f"{bound_set.namespace}-node-2"
    assert f"drain node {node}" in fault["detail"]["plan"], fault["detail"]
    assert not client.CoreV1Api(kube.api).read_node(node).spec.unschedulable
    [(pod, gone_s)] = bound_set.kubelet.absences
    assert pod == bound_set.pods[west] and gone_s >= 5.5, bound_set.kubelet.absences


@pytest.mark.slow
@pytest.mark.parametrize("bound_set", [{"zones": ["east", "east", "west"]}], indirect=True)
def test_a_zone_isolated_drops_everything_outside_its_pods_and_nodes(
    kube: Kube, bound_set: BoundSet, tmp_path: Path
) -> None:
    """zone-outage way isolate on the east zone (two members, so the guard's opt-in): one
    NetworkChaos per east pod, dropping what it sends anywhere but the east pods and their
    nodes; the west pod is its target. Every address outside the zone is dropped, none inside."""
    import ipaddress

    cut = [{"at": "2s", "kind": "zone-outage", "select": {"zone": "east"}, "duration": "3s"}]
    faults = _passed(kube, bound_set, tmp_path, cut, guards={"allow_quorum_loss": True})
    hosts = [m.host for m in bound_set.sandbox.spec.members]
    assert sorted(f["target"] for f in faults) == sorted(hosts[:2]), faults
    chaos = [o for o in bound_set.mesh.seen if o["kind"] == "NetworkChaos"]
    namespace, pods = bound_set.namespace, bound_set.pods
    assert sorted(o["spec"]["selector"]["pods"][namespace][0] for o in chaos) == sorted(
        pods[h] for h in hosts[:2]
    )
    for obj in chaos:
        spec = obj["spec"]
        assert spec["action"] == "partition" and spec["direction"] == "to", spec
        assert spec["target"]["selector"]["pods"][namespace] == [pods[hosts[2]]], spec
        dropped = [ipaddress.ip_network(c) for c in spec["externalTargets"]]

        def is_dropped(address: str, dropped: list[Any] = dropped) -> bool:
            return any(ipaddress.ip_address(address) in net for net in dropped)

        zone = ["10.1.0.1", "10.1.0.2", "10.2.0.1", "10.2.0.2"]  # east's pods and nodes
        assert not any(is_dropped(a) for a in zone), spec["externalTargets"]
        assert all(is_dropped(a) for a in ("10.1.0.3", "10.2.0.3", "10.1.0.4", "8.8.8.8"))
    assert rsdrill_objects(kube.api, namespace) == []


@pytest.mark.slow
def test_a_killed_run_is_recovered_from_its_journal(
    kube: Kube, bound_set: BoundSet, tmp_path: Path
) -> None:
    """SIGKILL while a PodChaos pod-failure is in force; `rsdrill recover` deletes it (and
    waits until Chaos Mesh has recovered it); a second recover finds nothing."""
    freeze = [{"at": "2s", "kind": "host-freeze", "engine": "chaos-mesh", "select": "secondary",
               "duration": "60s", "approximate": True}]  # fmt: skip
    path = bound_set.experiment(kube, tmp_path, faults=freeze)
    home = tmp_path / "home"
    run = run_file(path, tmp_path / "out", home)
    try:
        deadline = time.monotonic() + 60
        while not rsdrill_objects(kube.api, bound_set.namespace):
            assert run.poll() is None and time.monotonic() < deadline, run.communicate()[0]
            time.sleep(0.1)
    finally:
        run.kill()
        run.communicate(timeout=30)
    [(kind, name)] = rsdrill_objects(kube.api, bound_set.namespace)
    assert kind == "PodChaos"
    recover = rsdrill_cli("recover", home=home)
    output, _ = recover.communicate(timeout=120)
    assert recover.returncode == 0, output
    assert f"PodChaos {bound_set.namespace}/{name} deleted (its fault recovered)" in output
    assert rsdrill_objects(kube.api, bound_set.namespace) == []
    again = rsdrill_cli("recover", home=home)
    assert again.communicate(timeout=60)[0].startswith("nothing to recover")


@pytest.mark.slow
def test_litmus_run_keeps_litmus_verdict_in_the_result(
    kube: Kube, bound_set: BoundSet, litmus: LitmusOperator, tmp_path: Path
) -> None:
    """experiments/k8s-rs3-litmus-pod-delete.yaml (its fault earlier and shorter): Litmus deletes
    the primary's pod, rsdrill measures the failover, and result.json's fault detail carries the
    verdict and probe success percentage Litmus wrote into its ChaosResult."""
    from kubernetes import client

    [fault] = yaml.safe_load(LITMUS_EXPERIMENT.read_text())["faults"]
    shorter = [{**fault, "at": "2s", "duration": "6s"}]
    path = bound_set.experiment(kube, tmp_path, LITMUS_EXPERIMENT, faults=shorter)
    out = tmp_path / "out"
    run = run_file(path, out, tmp_path / "home")
    output, _ = run.communicate(timeout=120)
    assert run.returncode == 0, output
    result = json.loads((out / "result.json").read_text())
    failover = result["metrics"]["failover_s"]
    assert failover is not None and failover > 0
    [record] = result["faults"]
    assert record["kind"] == "host-kill" and record["verified_at_s"] is not None
    [written] = client.CustomObjectsApi(kube.api).list_namespaced_custom_object(
        "litmuschaos.io", "v1alpha1", bound_set.namespace, "chaosresults"
    )["items"]
    status = written["status"]["experimentStatus"]
    assert status["phase"] == "Completed"  # ran its course: not stopped by rsdrill
    kept = record["detail"]["litmus"]
    assert kept["result"] == written["metadata"]["name"]
    assert kept["verdict"] == status["verdict"] == litmus.verdict
    assert kept["probe_success_percentage"] == float(status["probeSuccessPercentage"])
    assert [p["verdict"] for p in kept["probes"]] == [
        p["status"]["verdict"] for p in written["status"]["probeStatuses"]
    ]
    assert rsdrill_objects(kube.api, bound_set.namespace) == []


def test_check_names_what_a_restricted_service_account_may_not_do(
    kube: Kube, bound_set: BoundSet, tmp_path: Path
) -> None:
    """`rsdrill check` against the real API server: as a ServiceAccount whose Role may only read
    pods, the platform line fails naming each RBAC refusal (exit 2); with the admin's every line
    holds (exit 0). Nothing is created either way."""
    path = bound_set.experiment(kube, tmp_path)
    document = yaml.safe_load(path.read_text())
    document["target"]["kubernetes"]["kubeconfig"] = str(
        _service_account_reading_pods(kube, bound_set.namespace)
    )
    restricted = tmp_path / "restricted.yaml"
    restricted.write_text(yaml.safe_dump(document))
    check = rsdrill_cli("check", str(restricted), home=tmp_path / "home")
    output, _ = check.communicate(timeout=120)
    assert check.returncode == 2, output
    assert "✔ reach " in output and "✔ privileges: the server does not require a login" in output
    assert "✘ platform kubernetes: " in output and "RBAC denies" in output, output
    assert f"create podchaos.chaos-mesh.org in namespace {bound_set.namespace}" in output
    allowed = rsdrill_cli("check", str(path), "--json", home=tmp_path / "home")
    report, _ = allowed.communicate(timeout=120)
    assert allowed.returncode == 0, report
    checks = json.loads(report)["checks"]
    assert all(c["ok"] is not False for c in checks)
    assert {c["name"] for c in checks} >= {"connection string", "server version", "topology",
                                          "privileges", "platform kubernetes"}  # fmt: skip
    assert rsdrill_objects(kube.api, bound_set.namespace) == []


def _service_account_reading_pods(kube: Kube, namespace: str) -> Path:
    """A kubeconfig with the token of a real ServiceAccount whose Role may get and list pods in
    `namespace` and nothing else."""
    from kubernetes import client

    core, rbac = client.CoreV1Api(kube.api), client.RbacAuthorizationV1Api(kube.api)
    name = "rsdrill-reads-pods"
    core.create_namespaced_service_account(namespace, {"metadata": {"name": name}})
    rbac.create_namespaced_role(namespace, {
        "metadata": {"name": name},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}],
    })  # fmt: skip
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        "roleRef": {"kind": "Role", "name": name, "apiGroup": "rbac.authorization.k8s.io"},
    })  # fmt: skip
    return kube.account_kubeconfig(namespace, name)


# -- host-freeze through pods/exec, end to end ---------------------------------------------------


class ContainedEngine(EmulatorEngine):
    """Each member in its own PID and mount namespaces, as in a container: a shell is the
    namespace's init and the member runs as `mongod` (this Python, with its packages, started
    by a path named so)."""

    def __init__(self, directory: Path) -> None:
        super().__init__(str(python_named(directory, "mongod")))

    def argv(self, sandbox: Any, member: Any, *, init: bool) -> list[str]:
        inner = super().argv(sandbox, member, init=init)
        return ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child",
                "sh", "-c", '"$@" & wait', "sh", *inner]  # fmt: skip


def _container_init(unshare_pid: int) -> int:
    """The namespace's init (the shell unshare forked)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        children = Path(f"/proc/{unshare_pid}/task/{unshare_pid}/children").read_text().split()
        if children:
            return int(children[0])
        time.sleep(0.05)
    raise AssertionError(f"unshare {unshare_pid} started nothing")


def _comm_pid(init: int, name: str) -> int:
    """The host PID of the process called `name` under the container's init."""
    for child in Path(f"/proc/{init}/task/{init}/children").read_text().split():
        if Path(f"/proc/{child}/comm").read_text().strip() == name:
            return int(child)
    raise AssertionError(f"no {name} under {init}")


@dataclass
class ContainedSet:
    """An rs3 whose members live in containers (ContainedEngine), their pods on the real API
    server on a node whose kubelet exec endpoint is tests/kubernetes/kubelet_exec; the
    pods' container statuses are the ContainerRuntime's (a container whose process exits is
    started again and its restart counted)."""

    sandbox: Any
    namespace: str
    pods: dict[str, str]  # member host:port → pod
    inits: dict[str, int]  # member → host PID of its container's init
    mongods: dict[str, int]  # member → host PID of its mongod
    uids: dict[str, str]  # pod → uid
    container_ids: dict[str, str]  # pod → its container's id, as first published

    def experiment(
        self,
        kube: Kube,
        tmp: Path,
        faults: list[dict[str, Any]],
        after_revert: str = "10s",
        **kubernetes: Any,
    ) -> Path:
        """EXPERIMENT aimed at this set, with `faults` and `kubernetes` target options."""
        return aimed(kube, tmp, EXPERIMENT, self.sandbox.uri, self.namespace, self.pods,
                     kubernetes, faults=faults, observe={"after_revert": after_revert})  # fmt: skip

    def state(self, host: str) -> str:
        """The member's mongod's state letter (T: stopped)."""
        return Path(f"/proc/{self.mongods[host]}/stat").read_text().rsplit(") ", 1)[1].split()[0]

    def untouched(self, kube: Kube) -> None:
        """Every member the same process, running; every pod as `pods_untouched` says."""
        for host, init in self.inits.items():
            assert _comm_pid(init, "mongod") == self.mongods[host], host
            assert self.state(host) in ("S", "R"), host
        self.pods_untouched(kube)

    def pods_untouched(self, kube: Kube) -> None:
        """Every pod the same (uid), its one container the same (id), running, never
        restarted (restartCount 0)."""
        from kubernetes import client

        core = client.CoreV1Api(kube.api)
        for pod, uid in self.uids.items():
            found = core.read_namespaced_pod(pod, self.namespace)
            assert found.metadata.uid == uid, pod
            statuses = found.status.container_statuses or []
            assert [s.name for s in statuses] == ["mongod"], f"{pod}: no container status"
            [status] = statuses
            assert status.restart_count == 0, f"{pod}: restarted {status.restart_count} times"
            assert status.container_id == self.container_ids[pod], f"{pod}: another container"
            assert status.state.running is not None, f"{pod}: {status.state}"


@pytest.fixture
def contained_set(
    kube: Kube, tmp_path: Path, free_port_base: Callable[[int], int]
) -> Iterator[ContainedSet]:
    from kubernetes import client

    from tests.kubernetes.cluster import BIN

    spec = build_topology(
        "rs3", port_base=free_port_base(3), settings=Settings(election_timeout_ms=2000)
    )
    sandbox = up(tmp_path / "set", spec, ContainedEngine(tmp_path))
    try:
        namespace = kube.namespace("freeze")
        node = f"{namespace}-node"
        core = client.CoreV1Api(kube.api)
        core.create_node({"metadata": {"name": node}})
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        core.patch_node_status(node, {"status": {
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
        }})  # fmt: skip
        pods = {m.host: f"mongo-{m.id}" for m in spec.members}
        inits = {m.host: _container_init(sandbox.pid(m)) for m in spec.members}
        mongods = {host: _comm_pid(init, "mongod") for host, init in inits.items()}
        (tmp_path / "pods.json").write_text(
            json.dumps({f"{namespace}/{pods[h]}": pid for h, pid in inits.items()})
        )
        for pod in pods.values():
            make_pod(kube.api, namespace, pod, node)
        uids = {p: core.read_namespaced_pod(p, namespace).metadata.uid for p in pods.values()}
        by_pod = {pod: spec.member(host) for host, pod in pods.items()}
        runtime = ContainerRuntime(
            kube.api,
            namespace,
            list(by_pod),
            running=lambda pod: sandbox.pid(by_pod[pod]),
            restart=lambda pod: sandbox.start(by_pod[pod]),
        ).start()
        deadline = time.monotonic() + 30
        while len(runtime.published) < len(pods):
            assert time.monotonic() < deadline and not runtime.errors, runtime.errors
            time.sleep(0.05)
        container_ids = {
            p: core.read_namespaced_pod(p, namespace).status.container_statuses[0].container_id
            for p in pods.values()
        }
        certs = kube.cluster.directory / "certs"
        kubelet = subprocess.Popen(
            [str(BIN / "kubelet-exec"), "-listen", f"127.0.0.1:{port}",
             "-cert", str(certs / "apiserver.crt"), "-key", str(certs / "apiserver.key"),
             "-pods", str(tmp_path / "pods.json")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            yield ContainedSet(sandbox, namespace, pods, inits, mongods, uids, container_ids)
        finally:
            runtime.stop()  # before the members go down: it would start them again
            kubelet.terminate()
            kubelet.wait(timeout=10)
        assert not runtime.errors, runtime.errors
    finally:
        sandbox.down(grace_s=2.0)


@pytest.mark.slow
def test_native_host_freeze_stops_the_same_process_through_the_kubelet(
    kube: Kube, contained_set: ContainedSet, tmp_path: Path
) -> None:
    """rsdrill run, host-freeze engine native on the primary: pods/exec goes through the real API
    server to a kubelet's exec endpoint (the kubelet's own streaming code, tests/kubernetes/
    kubelet_exec) and into the member's container (PID and mount namespaces); the member is
    stopped, a new primary is elected, and after the revert it is the same process (same PID,
    never restarted), its pod untouched (same uid, restartCount 0)."""
    freeze = [{"at": "2s", "kind": "host-freeze", "select": "primary", "duration": "5s"}]
    out = tmp_path / "out"
    run = run_file(contained_set.experiment(kube, tmp_path, freeze), out, tmp_path / "home")
    output, _ = run.communicate(timeout=240)
    assert run.returncode in (0, 1), output
    result = json.loads((out / "result.json").read_text())
    [fault] = result["faults"]
    assert fault["verified_at_s"] is not None and fault["reverted_at_s"] is not None, output
    assert fault["detail"]["frozen_pids"] == [2]  # the shell is the container's PID 1
    failover = result["metrics"]["failover_s"]
    assert failover is not None and failover > 0
    contained_set.untouched(kube)
    recover = rsdrill_cli("recover", home=tmp_path / "home")
    assert recover.communicate(timeout=60)[0].startswith("nothing to recover")


@pytest.mark.slow
def test_a_run_killed_while_a_member_is_frozen_is_resumed_by_recover(
    kube: Kube, contained_set: ContainedSet, tmp_path: Path
) -> None:
    """SIGKILL while the native freeze holds: the member stays stopped (nothing else would
    resume it); `rsdrill recover` sends SIGCONT through pods/exec from the journal alone."""
    freeze = [{"at": "1s", "kind": "host-freeze", "select": "secondary", "duration": "60s"}]
    home = tmp_path / "home"
    run = run_file(contained_set.experiment(kube, tmp_path, freeze), tmp_path / "out", home)
    output = kill_after_line(run, "injected", 0.5)
    assert "injected" in output, output
    stopped = [h for h in contained_set.mongods if contained_set.state(h) == "T"]
    assert len(stopped) == 1, output
    recover = rsdrill_cli("recover", home=home)
    said, _ = recover.communicate(timeout=120)
    assert recover.returncode == 0, said
    pod = contained_set.pods[stopped[0]]
    assert f"SIGCONT sent to mongod (pid 2) in pod {contained_set.namespace}/{pod}" in said, said
    contained_set.untouched(kube)


@pytest.mark.slow
def test_a_restarted_container_is_counted_and_fails_the_pods_check(
    kube: Kube, contained_set: ContainedSet
) -> None:
    """What the freeze tests check can fail: a member's container process killed (as an OOM
    kill, or Chaos Mesh's pod-failure, would end it) is started again by the runtime, which
    publishes restartCount 1 and a new containerID, and `pods_untouched` refuses it."""
    from kubernetes import client

    host, pod = next(iter(contained_set.pods.items()))
    sandbox = contained_set.sandbox
    os.killpg(sandbox.pid(sandbox.spec.member(host)), signal.SIGKILL)
    core = client.CoreV1Api(kube.api)
    deadline = time.monotonic() + 60
    while True:
        [status] = core.read_namespaced_pod(pod, contained_set.namespace).status.container_statuses
        if status.restart_count == 1:
            break
        assert time.monotonic() < deadline, status
        time.sleep(0.1)
    assert status.container_id != contained_set.container_ids[pod]
    assert status.last_state.terminated is not None and status.state.running is not None
    with pytest.raises(AssertionError, match=f"{pod}: restarted 1 times"):
        contained_set.pods_untouched(kube)


# -- chaos for rsdrill on the Kubernetes path (the sandbox's is tests/e2e/test_chaos_of_rsdrill.py)

# About 11 s a kill here: the suite's time is kept in mind (RSDRILL_CHAOS_KILLS=50 for the
# issue's acceptance run, bench/results/chaos-kubernetes-50.txt).
CHAOS_KILLS = int(os.environ.get("RSDRILL_CHAOS_KILLS", "3"))
CHAOS_FAULTS = [
    {"at": "1s", "kind": "host-freeze", "select": "secondary", "duration": "1.5s"},
    {"at": "1s", "kind": "host-freeze", "engine": "chaos-mesh", "select": "secondary",
     "duration": "1.5s", "approximate": True},
    {"at": "1s", "kind": "iops-throttle", "engine": "native", "select": "secondary",
     "write_iops": 20, "read_mb_s": 2, "duration": "1.5s"},
    {"at": "1s", "kind": "network-partition", "select": "secondary", "isolate_from": "members",
     "duration": "1.5s"},
    {"at": "1s", "kind": "disk-fault", "select": "secondary", "errno": "EIO",
     "duration": "1.5s"},
]  # fmt: skip
# (marker line, lowest delay, highest delay): before the fault, while it holds, while reverting.
CHAOS_MOMENTS = {
    "steady": ("phase: faults", 0.0, 0.9),
    "injected": ("injected", 0.0, 1.4),
    "reverting": ("injected", 1.5, 2.1),
}
_CAP_FILES = ("read_iops_device", "write_iops_device", "read_bps_device", "write_bps_device")


@dataclass
class ChaosSet:
    """The contained set with what its faults need: a record of its Chaos Mesh objects, and
    the node agent on the pods' node with a cgroup per pod (named by the pod's uid and container
    id, as kubelet's cgroupfs driver names them)."""

    members: ContainedSet
    mesh: ChaosObjects
    agent_port: int
    ca_file: str
    kubeconfig: Path  # the runs' identity: a ServiceAccount, as the node agent requires
    cgroups: dict[str, Path]  # pod → its container's blkio cgroup

    def applied(self, kube: Kube) -> list[str]:
        """Whatever a fault left in force: chaos objects, stopped mongods, I/O caps."""
        found = [
            f"{kind} {name}" for kind, name in rsdrill_objects(kube.api, self.members.namespace)
        ]
        found += [f"{host}: mongod stopped" for host in self.members.mongods
                  if self.members.state(host) == "T"]  # fmt: skip
        found += [
            f"{pod}: {name} {text.strip()}"
            for pod, cgroup in self.cgroups.items()
            for name in _CAP_FILES
            if (text := (cgroup / f"blkio.throttle.{name}").read_text()).strip()
        ]
        return found


@pytest.fixture
def chaos_set(kube: Kube, contained_set: ContainedSet, tmp_path: Path) -> Iterator[ChaosSet]:
    from kubernetes import client

    from tests.harness.cgroups import pod_cgroups

    namespace = contained_set.namespace
    containers = {contained_set.uids[pod]: cid.split("://")[1]
                  for pod, cid in contained_set.container_ids.items()}  # fmt: skip
    # The runs' identity: a ServiceAccount with the admin's rights (the node agent admits only
    # a ServiceAccount's token bound to its audience, and this one only).
    kubeconfig = kube.cluster.kubeconfig(
        f"{namespace}-runner", service_account_token(kube.api, namespace, "runner")
    )
    client.RbacAuthorizationV1Api(kube.api).create_cluster_role_binding({
        "metadata": {"name": f"{namespace}-runner"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": "runner", "namespace": namespace}],
    })  # fmt: skip
    runner = f"system:serviceaccount:{namespace}:runner"
    mesh = ChaosObjects(kube.api, namespace).start()
    try:
        with (
            pod_cgroups(containers) as (root, by_uid),
            node_agent(kube, namespace, root, tmp_path / "agent-state", runner) as url,
        ):
            cgroups = {pod: by_uid[uid] for pod, uid in contained_set.uids.items()}
            ca_file = str(kube.cluster.directory / "certs" / "apiserver.crt")
            yield ChaosSet(contained_set, mesh, int(url.rsplit(":", 1)[1]), ca_file, kubeconfig,
                           cgroups)  # fmt: skip
    finally:
        mesh.stop()
    assert not mesh.errors, mesh.errors


@pytest.mark.slow
def test_sigkill_at_random_moments_then_recover_leaves_nothing_applied(
    kube: Kube, chaos_set: ChaosSet, tmp_path: Path
) -> None:
    """`rsdrill run` SIGKILLed at seeded random moments (before, during, while reverting) of
    Chaos Mesh faults, the native pods/exec freeze and the node agent's I/O cap;
    `rsdrill recover` then exits 0 and nothing is left applied: no chaos object, no stopped
    mongod, no cap; the pods' containers never restarted."""
    rng = random.Random(int(os.environ.get("RSDRILL_CHAOS_SEED", "16")))
    left_behind: list[str] = []
    kinds: list[str] = []
    members = chaos_set.members
    for i in range(CHAOS_KILLS):
        # Every moment in turn; the fault and the delay drawn.
        moment = sorted(CHAOS_MOMENTS)[i % len(CHAOS_MOMENTS)]
        fault = rng.choice(CHAOS_FAULTS)
        marker, low, high = CHAOS_MOMENTS[moment]
        delay_s = rng.uniform(low, high)
        work = tmp_path / f"kill-{i}"
        work.mkdir()
        path = members.experiment(
            kube, work, [fault], after_revert="1s", volume_path="/tmp",
            node_agent={"port": chaos_set.agent_port, "ca_file": chaos_set.ca_file},
            kubeconfig=str(chaos_set.kubeconfig),
        )  # fmt: skip
        run = run_file(path, work / "out", work / "home")
        output = kill_after_line(run, marker, delay_s)
        way = f"{fault['kind']} ({fault.get('engine', 'default')})"
        case = f"kill {i}: {way} {moment} +{delay_s:.2f}s"
        print(case)  # the run's record, shown with -rP
        assert marker in output, f"{case}: the run never printed {marker!r}:\n{output}"
        # A refused run (exit 2) prints 'nothing was injected', which holds the marker too.
        assert run.returncode != 2, f"{case}: the run was refused:\n{output}"
        left = chaos_set.applied(kube)
        left_behind += left
        kinds += [way] if left else []
        recover = rsdrill_cli("recover", home=work / "home")
        said, _ = recover.communicate(timeout=120)
        assert recover.returncode == 0, f"{case}:\n{said}"
        assert chaos_set.applied(kube) == [], f"{case}:\n{said}"
        members.pods_untouched(kube)
    print(f"{CHAOS_KILLS} kills; faults left for recover to undo: {len(kinds)} "
          f"({', '.join(sorted(set(kinds)))})")  # fmt: skip
    # Some kill left a fault in force for recover to undo (else nothing was tested).
    assert left_behind
