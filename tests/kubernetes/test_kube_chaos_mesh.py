"""Chaos Mesh's real controller-manager acting on the objects rsdrill creates
(tests/kubernetes/chaos_mesh.py) with every Chaos Mesh CRD, beside the real StatefulSet
controller and scheduler: the status rsdrill waits for, the finalizer that
holds an object until its fault is recovered, and the recovery itself are Chaos Mesh's."""

from __future__ import annotations

import json
import os
import socket
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rsdrill.connection import ConnectOptions
from rsdrill.faultfs.control import request as faultfs_request
from rsdrill.history import History
from rsdrill.sandbox.config import member_dir
from rsdrill.states import member_state
from tests.harness.members import wait_until
from tests.harness.processes import kill_after_line
from tests.harness.sharded_cluster import wait_back_as_secondary
from tests.kubernetes.bound import BoundSet, file_run, rsdrill_cli, run_file
from tests.kubernetes.chaos_mesh import DAEMON_PORT, DAEMON_SERVER_NAME
from tests.kubernetes.cluster import REPO
from tests.kubernetes.conftest import Kube
from tests.kubernetes.support import rsdrill_objects

# About 5 s a kill; RSDRILL_CHAOS_KILLS=50 for the acceptance run
# (bench/results/chaos-mesh-real-50.txt).
CHAOS_KILLS = int(os.environ.get("RSDRILL_CHAOS_KILLS", "3"))
MEMBER_IMAGE = "mongo:7.0"  # tests/kubernetes/support.make_statefulset's


def _events(kube: Kube, namespace: str, name: str) -> list[str]:
    """The reasons of the Events recorded on the object `name` (Chaos Mesh records its steps)."""
    from kubernetes import client

    listed = client.CoreV1Api(kube.api).list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name}"
    )
    return [event.reason for event in listed.items]


def _images(kube: Kube, namespace: str) -> dict[str, list[str]]:
    from kubernetes import client

    pods = client.CoreV1Api(kube.api).list_namespaced_pod(namespace).items
    return {pod.metadata.name: [c.image for c in pod.spec.containers] for pod in pods}


def _run(kube: Kube, bound_set: BoundSet, tmp: Path, faults: list[dict[str, Any]],
         **changes: Any) -> dict[str, Any]:  # fmt: skip
    """`rsdrill run` of the bound set's experiment with `faults` (and `changes`): its result,
    once it exited 0."""
    path = bound_set.experiment(kube, tmp, faults=faults, **changes)
    run = run_file(path, tmp / "out", tmp / "home")
    output, _ = run.communicate(timeout=240)
    assert run.returncode == 0, output
    return dict(json.loads((tmp / "out" / "result.json").read_text()))


@pytest.mark.slow
def test_the_real_controller_kills_the_primarys_pod(
    kube: Kube, bound_set: BoundSet, tmp_path: Path
) -> None:
    """experiments/k8s-rs3-pod-kill.yaml (its fault at 2 s, kept 5 s): Chaos Mesh's controller
    takes the PodChaos (its finalizer, its records), kills the primary's pod, and rsdrill
    measures the failover within the file's SLO; deleted by rsdrill's revert, the object is
    recovered and released by the controller. The real StatefulSet controller brings the pod
    back and its member rejoins."""
    faults = [{"at": "2s", "kind": "host-kill", "engine": "chaos-mesh", "select": "primary",
               "duration": "5s"}]  # fmt: skip
    result = _run(kube, bound_set, tmp_path, faults, observe={"after_revert": "3s"})
    [fault] = result["faults"]
    assert fault["verified_at_s"] is not None and fault["reverted_at_s"] is not None, fault
    failover = result["metrics"]["failover_s"]
    print(f"failover {failover}s, write gap {result['metrics']['write_unavailable_s']}s")
    assert failover is not None and 0 < failover <= 12.7
    [chaos] = [o for o in bound_set.mesh.seen if o["kind"] == "PodChaos"]
    pod = bound_set.pods[fault["target"]]
    assert chaos["spec"]["selector"]["pods"] == {bound_set.namespace: [pod]}
    reasons = _events(kube, bound_set.namespace, chaos["metadata"]["name"])
    assert "FinalizerInited" in reasons and "Applied" in reasons, reasons  # Chaos Mesh's own
    assert rsdrill_objects(kube.api, bound_set.namespace) == []
    [(back, absent_s)] = bound_set.kubelet.absences
    assert back == pod and absent_s < 30, bound_set.kubelet.absences


@pytest.mark.slow
def test_the_real_controllers_pod_failure_takes_the_primary_down_until_recovered(
    kube: Kube, bound_set: BoundSet, tmp_path: Path
) -> None:
    """host-freeze through Chaos Mesh's pod-failure (an approximation: the container restarts
    in a pause image, the member with it): the real controller swaps the primary's image, the
    set fails over, and when rsdrill deletes the PodChaos the controller restores the image,
    the member starts again and rejoins as a secondary."""
    freeze = [{"at": "2s", "kind": "host-freeze", "engine": "chaos-mesh", "select": "primary",
               "duration": "4s", "approximate": True}]  # fmt: skip
    result = _run(kube, bound_set, tmp_path, freeze, slo={}, observe={"after_revert": "3s"})
    [fault] = result["faults"]
    failover = result["metrics"]["failover_s"]
    print(f"failover {failover}s; the member {fault['target']} back after the revert")
    assert fault["verified_at_s"] is not None and failover is not None and failover > 0
    assert rsdrill_objects(kube.api, bound_set.namespace) == []
    assert _images(kube, bound_set.namespace)[bound_set.pods[fault["target"]]] == [MEMBER_IMAGE]
    wait_until(lambda: not bound_set.kubelet.swapped, 30, "the member's image back")
    wait_back_as_secondary(fault["target"])


@pytest.mark.slow
def test_sigkill_with_a_pod_failure_in_force_then_recover_leaves_nothing_injected(
    kube: Kube, bound_set: BoundSet, tmp_path: Path
) -> None:
    """`rsdrill run` SIGKILLed while Chaos Mesh's pod-failure holds a secondary's pod (its
    containers' image swapped for the pause image, by the real controller), CHAOS_KILLS times;
    each time `rsdrill recover` deletes the PodChaos, the controller restores the images and
    drops its finalizer: no chaos object is left, and every pod runs its member's image."""
    freeze = [{"at": "1s", "kind": "host-freeze", "engine": "chaos-mesh", "select": "secondary",
               "duration": "60s", "approximate": True}]  # fmt: skip
    namespace = bound_set.namespace
    swapped = 0
    for i in range(CHAOS_KILLS):
        work = tmp_path / f"kill-{i}"
        work.mkdir()
        path = bound_set.experiment(kube, work, faults=freeze, slo={})
        output = kill_after_line(run_file(path, work / "out", work / "home"), "injected", 0.5)
        assert "injected" in output, output
        left = rsdrill_objects(kube.api, namespace)
        assert [kind for kind, _ in left] == ["PodChaos"], f"kill {i}: {left}\n{output}"
        swapped += any(image != MEMBER_IMAGE for images in _images(kube, namespace).values()
                       for image in images)  # fmt: skip
        recover = rsdrill_cli("recover", home=work / "home")
        said, _ = recover.communicate(timeout=120)
        assert recover.returncode == 0, said
        assert "deleted (its fault recovered)" in said, said
        assert rsdrill_objects(kube.api, namespace) == []
        deadline = time.monotonic() + 30
        while any(images != [MEMBER_IMAGE] for images in _images(kube, namespace).values()):
            assert time.monotonic() < deadline, _images(kube, namespace)
            time.sleep(0.1)
        # Its container back in the member's image, the member rejoins before the next run.
        wait_until(lambda: not bound_set.kubelet.swapped, 30, "the member's image back")
        for member in bound_set.sandbox.spec.members:
            if member_state(member.host, 1.0, options=ConnectOptions()) != "PRIMARY":
                wait_back_as_secondary(member.host)
    print(f"{CHAOS_KILLS} kills, the pause image in force at {swapped} of them")
    assert swapped == CHAOS_KILLS  # the controller really injected before each kill


def test_the_charts_webhooks_refuse_what_chaos_mesh_refuses(kube: Kube) -> None:
    """Chaos Mesh's validating webhook (the chart's configuration) answers the API server: a
    PodChaos whose schema holds but whose value Chaos Mesh forbids is refused with its reason."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    namespace = kube.namespace("webhook")
    body = {
        "apiVersion": "chaos-mesh.org/v1alpha1", "kind": "PodChaos",
        "metadata": {"name": "too-many"},
        "spec": {"action": "pod-kill", "mode": "fixed-percent", "value": "200",
                 "selector": {"pods": {namespace: ["mongo-0"]}}},
    }  # fmt: skip
    custom = client.CustomObjectsApi(kube.api)
    with pytest.raises(ApiException) as refused:
        custom.create_namespaced_custom_object(
            "chaos-mesh.org", "v1alpha1", namespace, "podchaos", body
        )
    said = str(refused.value.body)
    assert 'admission webhook \\"vpodchaos.kb.io\\" denied the request' in said, said
    assert "Must be (0,100] with mode:fixed-percent" in said, said


def _pod_status(kube: Kube, namespace: str, pod: str) -> tuple[str, str]:
    """The pod's container id and address, as its kubelet reported them."""
    from kubernetes import client

    read = client.CoreV1Api(kube.api).read_namespaced_pod(pod, namespace)
    return str(read.status.container_statuses[0].container_id), str(read.status.pod_ip)


Calls = list[dict[str, Any]]


def _clock_skew(calls: Calls, target: str, _: dict[str, str]) -> None:
    [apply, recover] = calls
    assert apply["method"] == "SetTimeOffset" and recover["method"] == "RecoverTimeOffset"
    assert apply["request"]["container_id"] == recover["request"]["container_id"] == target
    assert apply["request"]["sec"] == 30 and apply["request"]["clk_ids_mask"] == 1  # REALTIME


def _disk_latency(calls: Calls, target: str, _: dict[str, str]) -> None:
    [apply, recover] = calls
    assert apply["method"] == recover["method"] == "ApplyIOChaos"
    assert apply["request"]["container_id"] == recover["request"]["container_id"] == target
    [action] = json.loads(apply["request"]["actions"])
    assert (action["type"], action["latency"], sorted(action["methods"])) == (
        "latency", "50ms", ["fsync", "write"]
    ), action  # fmt: skip
    assert apply["request"]["volume"] == "/data/db" and action["path"] == "/data/db/**/*"
    # No actions left: the daemon takes its injection away (the one it reported).
    assert json.loads(recover["request"]["actions"]) is None
    assert recover["request"]["instance"] > 0


def _cpu_stress(calls: Calls, target: str, _: dict[str, str]) -> None:
    [apply, recover] = calls
    assert apply["method"] == "ExecStressors" and recover["method"] == "CancelStressors"
    assert apply["request"]["target"] == target
    assert "--cpu 1 " in apply["request"]["cpuStressors"] + " "  # 1 worker: 1/0.5 - 1
    assert recover["request"]["cpuInstance"] == "standin"  # the instance the daemon reported


def _partition(calls: Calls, target: str, addresses: dict[str, str]) -> None:
    """The target's pod drops what goes to or comes from the others, and theirs what goes to
    or comes from it; each pod's rules emptied at the end."""
    by_container: dict[str, Calls] = {}
    for call in calls:
        by_container.setdefault(call["request"]["container_id"], []).append(call)
    assert set(by_container) == set(addresses), by_container.keys()
    for container, own in by_container.items():
        [ipsets, *_] = [c["request"].get("ipsets", []) for c in own if c["method"] == "FlushIPSets"]
        dropped = {cidr for s in ipsets for cidr in s.get("cidrs", [])}
        others = {f"{ip}/32" for c, ip in addresses.items() if c != container}
        assert dropped == (others if container == target else {f"{addresses[target]}/32"})
        chains = [c["request"].get("chains", []) for c in own if c["method"] == "SetIptablesChains"]
        assert {(c.get("direction", 0), c["target"]) for c in chains[0]} == {
            (0, "DROP"), (1, "DROP")}, chains[0]  # fmt: skip
        assert chains[-1] == [], chains[-1]


# Each kind that needs chaos-daemon: the fault, and what the daemon must have been asked to do
# (and to undo) by the real controller.
DAEMON_FAULTS: dict[str, tuple[dict[str, Any], Callable[[Calls, str, dict[str, str]], None]]] = {
    "clock-skew": ({"kind": "clock-skew", "clock_offset": 30}, _clock_skew),
    "disk-fault": ({"kind": "disk-fault", "errno": "none", "latency": "50ms"}, _disk_latency),
    "network-partition": ({"kind": "network-partition"}, _partition),
    "cpu-starve": ({"kind": "cpu-starve", "cpu_share": 0.5, "approximate": True}, _cpu_stress),
}


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(DAEMON_FAULTS))
def test_the_real_controller_reaches_the_daemon_and_recovers_through_it(
    kube: Kube, bound_set: BoundSet, tmp_path: Path, kind: str
) -> None:
    """A fault whose Chaos Mesh kind needs chaos-daemon: the real controller finds the daemon
    of the pod's node (the stand-in behind its gRPC service), asks it to inject into the
    secondary's container what the fault means, and rsdrill reads the AllInjected it writes;
    on rsdrill's revert the controller asks the daemon to undo it before it lets the object
    go."""
    if kube.daemon is None:
        pytest.skip("the stand-in chaos-daemon needs root and `ip` for its network namespace")
    fault, check = DAEMON_FAULTS[kind]
    before = len(kube.daemon.calls())
    faults = [{"at": "1s", "engine": "chaos-mesh", "select": "secondary", "duration": "3s",
               **fault}]  # fmt: skip
    result = _run(kube, bound_set, tmp_path, faults, slo={})
    [done] = result["faults"]
    assert done["verified_at_s"] is not None and done["reverted_at_s"] is not None, done
    statuses = {pod: _pod_status(kube, bound_set.namespace, pod)
                for pod in bound_set.pods.values()}  # fmt: skip
    calls = kube.daemon.calls()[before:]
    print(kind, [c["method"] for c in calls])
    check(calls, statuses[bound_set.pods[done["target"]]][0], dict(statuses.values()))
    assert rsdrill_objects(kube.api, bound_set.namespace) == []


IO_LATENCY = REPO / "experiments" / "k8s-rs3-primary-io-latency.yaml"


@pytest.mark.slow
@pytest.mark.parametrize("bound_set", [{"volumes": True}], indirect=True)
def test_the_catalogs_io_latency_slows_the_primarys_writes_through_the_real_controller(
    kube: Kube, bound_set: BoundSet, tmp_path: Path
) -> None:
    """experiments/k8s-rs3-primary-io-latency.yaml, its times shortened: the real controller
    takes rsdrill's chaos object and asks the daemon to delay the primary's volume; the
    stand-in does it there (a faultfs delay on the member's data directory), so the member
    feels it: majority writes slow down by about the delay for as long as the fault holds,
    nothing fails over, and after rsdrill's revert the controller has the daemon take it away
    (no rule left on any member's volume)."""
    if kube.daemon is None:
        pytest.skip("the stand-in chaos-daemon needs root and `ip` for its network namespace")
    mounts = {member.host: member_dir(bound_set.sandbox.directory, member) / "data"
              for member in bound_set.sandbox.spec.members}  # fmt: skip
    delayed = {host: _delayed(mount) for host, mount in mounts.items()}
    before = len(kube.daemon.calls())
    result = file_run(kube, bound_set, tmp_path, IO_LATENCY, at="3s", duration="6s")
    [done] = result["faults"]
    assert done["verified_at_s"] is not None and done["reverted_at_s"] is not None, done
    calls = [c["method"] for c in kube.daemon.calls()[before:]]
    print("daemon calls", calls, "metrics", result["metrics"])
    assert calls in (["ApplyBlockChaos", "RecoverBlockChaos"], ["ApplyIOChaos", "ApplyIOChaos"])
    assert result["metrics"]["failover_s"] is None
    # The primary's volume delayed operations while the fault held; no other volume did.
    slowed = {host: _delayed(mount) - delayed[host] for host, mount in mounts.items()}
    print("operations delayed per volume", slowed)
    assert slowed.pop(done["target"]) >= 10 and set(slowed.values()) == {0}, slowed
    history = History.read_jsonl(tmp_path / "out" / "history.jsonl")
    writes = [op for op in history if op.probe == "write" and op.ok]
    held = (done["verified_at_s"] + 1, done["reverted_at_s"] - 0.5)
    faulted = sorted(op.t_end - op.t_start for op in writes if held[0] <= op.t_start <= held[1])
    calm = sorted(op.t_end - op.t_start for op in writes if op.t_end < done["injected_at_s"])
    print("majority writes (ms), before:", [round(t * 1000, 1) for t in calm],
          "during:", [round(t * 1000, 1) for t in faulted])  # fmt: skip
    # A busy machine slows every write; it cannot make one faster than the primary's delayed
    # fsync (20 ms), which each majority write waits for while the fault holds.
    assert faulted[0] >= 0.015 and calm[0] < faulted[0], (calm[:3], faulted[:3])
    for host, mount in mounts.items():
        assert faultfs_request(mount, {"op": "status"})["rules"] == {}, host


def _delayed(mount: Path) -> int:
    """How many operations a member's faultfs volume has delayed since it was mounted."""
    return int(faultfs_request(mount, {"op": "status"})["counters"].get("delayed", 0))


def _daemon_answers(kube: Kube, context: ssl.SSLContext) -> bool:
    """Whether the daemon takes an HTTP/2 connection (gRPC's) over TLS made with `context`:
    it answers the client's preface with its SETTINGS frame."""
    assert kube.daemon is not None
    with socket.create_connection((kube.daemon.address, DAEMON_PORT), timeout=5) as raw:
        try:
            with context.wrap_socket(raw, server_hostname=DAEMON_SERVER_NAME) as tls:
                tls.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
                return len(tls.recv(9)) > 0
        except (ssl.SSLError, ConnectionError):
            return False


def test_the_daemon_admits_only_a_caller_the_charts_ca_signed(kube: Kube) -> None:
    """The stand-in serves the daemon's mutual TLS as the chart sets it up (the real
    controller's calls above carry its client certificate): a caller with none is refused
    before it can ask for anything."""
    if kube.daemon is None:
        pytest.skip("the stand-in chaos-daemon needs root and `ip` for its network namespace")
    trusting = ssl.create_default_context(cafile=str(kube.daemon.ca))
    trusting.set_alpn_protocols(["h2"])
    assert not _daemon_answers(kube, trusting)
    trusting.load_cert_chain(str(kube.daemon.client))
    assert _daemon_answers(kube, trusting)


def _may(kube: Kube, user: str, verb: str, resource: str, group: str = "",
         namespace: str | None = None) -> bool:  # fmt: skip
    """The API server's answer (a SubjectAccessReview, asked as the admin) to whether `user`
    may `verb` `resource` (in `namespace`, else cluster-wide)."""
    from kubernetes import client

    attributes = {"verb": verb, "resource": resource, "group": group}
    if namespace is not None:
        attributes["namespace"] = namespace
    review = client.AuthorizationV1Api(kube.api).create_subject_access_review(
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {"user": user, "resourceAttributes": attributes},
        }
    )
    return bool(review.status.allowed)


# What each real controller's own account may and may not do: what it acts with in the tests
# above is what its chart or Kubernetes' bootstrap policy grants, not the admin's rights.
ACCOUNTS = {
    "system:serviceaccount:chaos-mesh:chaos-controller-manager": (
        [
            ("delete", "pods", ""),
            ("update", "podchaos", "chaos-mesh.org"),
            ("update", "podiochaos", "chaos-mesh.org"),
        ],
        [
            ("delete", "nodes", ""),
            ("create", "clusterrolebindings", "rbac.authorization.k8s.io"),
            ("delete", "statefulsets", "apps"),
            ("impersonate", "users", ""),
        ],
    ),
    "system:serviceaccount:kube-system:statefulset-controller": (
        [("create", "pods", ""), ("update", "statefulsets/status", "apps")],
        [
            ("delete", "nodes", ""),
            ("create", "podchaos", "chaos-mesh.org"),
            ("create", "clusterrolebindings", "rbac.authorization.k8s.io"),
        ],
    ),
    "system:serviceaccount:kube-system:node-controller": (
        [("delete", "pods", ""), ("update", "nodes/status", "")],
        [("create", "pods", ""), ("delete", "podchaos", "chaos-mesh.org")],
    ),
    "system:kube-scheduler": (
        [("create", "pods/binding", "")],  # (and delete pods: to preempt them)
        [("create", "pods", ""), ("update", "nodes", ""), ("delete", "nodes", "")],
    ),
}


@pytest.mark.parametrize("user", list(ACCOUNTS))
def test_each_real_controller_acts_with_its_own_rights_only(kube: Kube, user: str) -> None:
    """The real controllers run under their own identities (Chaos Mesh's ServiceAccount with
    its chart's RBAC; kube-controller-manager with a ServiceAccount per controller; the
    scheduler as itself): each may do what it did to rsdrill's objects here, in the set's
    namespaces, and not what a cluster's admin may (so rsdrill's objects pass the controllers'
    own rights, as in a user's cluster)."""
    allowed, refused = ACCOUNTS[user]
    namespace = kube.namespace("rights")
    for verb, resource, group in allowed:
        assert _may(kube, user, verb, resource, group, namespace), (verb, resource)
    for verb, resource, group in refused:
        assert not _may(kube, user, verb, resource, group, namespace), (verb, resource)


def _proc_strings(pid: int, name: str) -> list[str]:
    return [s.decode() for s in Path(f"/proc/{pid}/{name}").read_bytes().split(b"\0") if s]


def test_the_real_controllers_run_as_those_accounts(kube: Kube) -> None:
    """What the test above checks is who the processes are: Chaos Mesh's controller-manager
    authenticates with its ServiceAccount's token (the API server says who it is, from the
    kubeconfig the process was started with), and kube-controller-manager gives each controller
    its own ServiceAccount's credentials."""
    from kubernetes import client, config

    if kube.chaos_mesh is None:
        pytest.skip("Chaos Mesh's controller-manager is not running here")
    [kubeconfig] = [e.split("=", 1)[1] for e in _proc_strings(kube.chaos_mesh.pid, "environ")
                    if e.startswith("KUBECONFIG=")]  # fmt: skip
    api = config.new_client_from_config(kubeconfig)
    try:
        review = client.AuthenticationV1Api(api).create_self_subject_review(
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        )
    finally:
        api.close()
    assert review.status.user_info.username == (
        "system:serviceaccount:chaos-mesh:chaos-controller-manager")  # fmt: skip
    argvs = [_proc_strings(p.pid, "cmdline") for p in kube.cluster.processes]
    [kcm] = [argv for argv in argvs if argv[0].endswith("kube-controller-manager")]
    assert "--use-service-account-credentials=true" in kcm
