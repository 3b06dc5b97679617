"""Building blocks for the Kubernetes tests: pods and nodes as the controllers would leave them,
experiments aimed at them, listings of what rsdrill created, ServiceAccount tokens and the node
agent as a process."""

from __future__ import annotations

import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rsdrill.experiment.schema import Experiment

MANAGED = "app.kubernetes.io/managed-by=rsdrill"
CHAOS_PLURALS = ("podchaos", "iochaos", "networkchaos", "blockchaos", "timechaos", "stresschaos")


def make_node(api: Any, name: str, zone: str | None = None) -> None:
    """A node, registered and Ready as its kubelet reports it (the kube fixture's heartbeat
    keeps it so); in `zone` (its well-known topology label) when given."""
    from kubernetes import client

    from tests.kubernetes.kubelet import report_ready

    labels = {"kubernetes.io/hostname": name}
    if zone is not None:
        labels["topology.kubernetes.io/zone"] = zone
    client.CoreV1Api(api).create_node({"metadata": {"name": name, "labels": labels}})
    report_ready(api, name)


def delete_nodes(api: Any, names: list[str]) -> None:
    """Nodes deleted (those already gone, e.g. by a drain's delete, skipped); their leases go
    with them (owned by the Node), their pods with the pod GC."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    for name in names:
        try:
            client.CoreV1Api(api).delete_node(name)
        except ApiException as exc:
            if exc.status != 404:
                raise


STORAGE_CLASS = "rsdrill-local"


def make_statefulset(
    api: Any,
    namespace: str,
    nodes: list[str],
    name: str = "mongo",
    limits: dict[str, str] | None = None,
) -> list[str]:
    """A StatefulSet `name` of one mongod pod per node (its container with these resource
    `limits`, if any), as a set on local volumes is deployed:
    pod i's claim is bound beforehand to a local PersistentVolume on nodes[i], so the real
    scheduler puts the pod there, and the real StatefulSet controller's replacement of a
    deleted pod goes back there (Pending while that node is cordoned); a headless Service names
    the members. Returns the pods' names; the pods are created by the controller."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    core = client.CoreV1Api(api)
    try:
        client.StorageV1Api(api).create_storage_class({
            "metadata": {"name": STORAGE_CLASS},
            "provisioner": "kubernetes.io/no-provisioner",
            "volumeBindingMode": "WaitForFirstConsumer",
        })  # fmt: skip
    except ApiException as exc:
        if exc.status != 409:  # another test's set made it
            raise
    pods = [f"{name}-{i}" for i in range(len(nodes))]
    storage = {"requests": {"storage": "1Gi"}}
    for pod, node in zip(pods, nodes, strict=True):
        core.create_persistent_volume({
            "metadata": {"name": f"{namespace}-{pod}"},
            "spec": {
                "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                "storageClassName": STORAGE_CLASS,
                "persistentVolumeReclaimPolicy": "Retain",
                # Reserved for its pod's claim, as a volume bound by hand is.
                "claimRef": {"namespace": namespace, "name": f"data-{pod}"},
                "local": {"path": f"/var/lib/mongo/{namespace}/{pod}"},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}},
            },
        })  # fmt: skip
    for pod in pods:
        core.create_namespaced_persistent_volume_claim(namespace, {
            "metadata": {"name": f"data-{pod}"},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": STORAGE_CLASS,
                     "volumeName": f"{namespace}-{pod}", "resources": storage},
        })  # fmt: skip
    core.create_namespaced_service(namespace, {
        "metadata": {"name": name},
        "spec": {"clusterIP": "None", "selector": {"app": name},
                 "ports": [{"name": "mongodb", "port": 27017}]},
    })  # fmt: skip
    client.AppsV1Api(api).create_namespaced_stateful_set(namespace, {
        "metadata": {"name": name},
        "spec": {
            "serviceName": name,
            "replicas": len(nodes),
            # Every member must run for the set to form: all pods at once, as database
            # charts deploy a replica set.
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{
                    "name": "mongod", "image": "mongo:7.0",
                    "volumeMounts": [{"name": "data", "mountPath": "/data/db"}],
                    **({"resources": {"limits": limits}} if limits else {}),
                }]},
            },
            "volumeClaimTemplates": [{
                "metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": STORAGE_CLASS,
                         "resources": storage},
            }],
        },
    })  # fmt: skip
    return pods


def wait_running(api: Any, namespace: str, pods: list[str], timeout_s: float = 60.0) -> None:
    """Until every pod in `pods` runs (scheduled, and started by the harness's kubelet)."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    deadline = time.monotonic() + timeout_s
    while True:
        found = {p.metadata.name: p for p in core.list_namespaced_pod(namespace).items}
        phases = {name: pod.status.phase for name, pod in found.items()}
        if all(phases.get(pod) == "Running" for pod in pods):
            return
        if time.monotonic() > deadline:
            # Why each one waits: the scheduler's verdict, the claims' binding, and the nodes
            # as the scheduler sees them.
            waiting = {name: [(c.type, c.status, c.reason, c.message)
                              for c in pod.status.conditions or []]
                       for name, pod in found.items() if phases[name] != "Running"}  # fmt: skip
            listed = core.list_namespaced_persistent_volume_claim(namespace).items
            claims = {c.metadata.name: (c.status.phase, c.spec.volume_name) for c in listed}
            nodes = {n.metadata.name: ([(t.key, t.effect) for t in n.spec.taints or []],
                                       [(c.type, c.status) for c in n.status.conditions or []])
                     for n in core.list_node().items}  # fmt: skip
            raise AssertionError(
                f"pods not running after {timeout_s:g}s: {phases}; waiting: {waiting}; "
                f"claims (phase, volume): {claims}; nodes (taints, conditions): {nodes}"
            )
        time.sleep(0.1)


def pod_manifest(
    name: str,
    node: str,
    labels: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A StatefulSet-like mongod pod, bound to `node` as the scheduler would (its mongod
    container with these resource `limits`, if any)."""
    resources = {"resources": {"limits": limits}} if limits else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {
                "app": "mongo",
                "statefulset.kubernetes.io/pod-name": name,
                **(labels or {}),
            },
        },
        "spec": {
            "nodeName": node,
            "hostname": name,
            "subdomain": "mongo",
            "containers": [
                {
                    "name": "mongod",
                    "image": "mongo:7.0",
                    "volumeMounts": [{"name": "data", "mountPath": "/data/db"}],
                    **resources,
                }
            ],
            "volumes": [{"name": "data", "emptyDir": {}}],
        },
    }


def make_pod(
    api: Any,
    namespace: str,
    name: str,
    node: str,
    limits: dict[str, str] | None = None,
    **addresses: str,
) -> tuple[dict[str, Any], str]:
    """Create the pod, running and ready as its kubelet would report it; its manifest and uid.
    (A Pending pod would ignore PodDisruptionBudgets.) `addresses`: as `mark_running`'s."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    manifest = pod_manifest(name, node, limits=limits)
    created = core.create_namespaced_pod(namespace, manifest)
    mark_running(api, namespace, name, **addresses)
    return manifest, created.metadata.uid


def mark_running(
    api: Any,
    namespace: str,
    name: str,
    *,
    restarts: int = 0,
    container_id: str | None = None,
    pod_ip: str | None = None,
    host_ip: str = "127.0.0.1",
) -> None:
    """Write the pod's status as its kubelet does, through the status subresource: Running and
    Ready, each container running with its `restarts` and its id (`container_id`, or a new
    one: a container just started); its address `pod_ip` (none by default) and its node's,
    `host_ip` (where a node agent of it listens)."""
    from kubernetes import client

    from tests.kubernetes.controllers import now as timestamp

    core = client.CoreV1Api(api)
    now = timestamp()
    containers = core.read_namespaced_pod(name, namespace).spec.containers
    statuses = [
        {
            "name": c.name,
            "image": c.image,
            "imageID": f"docker.io/library/{c.image}@sha256:{'0' * 64}",
            "containerID": container_id or f"containerd://{secrets.token_hex(32)}",
            "ready": True,
            "started": True,
            "restartCount": restarts,
            "state": {"running": {"startedAt": now}},
            **({"lastState": {"terminated": {"exitCode": 137, "reason": "Error"}}}
               if restarts else {}),
        }
        for c in containers
    ]  # fmt: skip
    status = {
        "phase": "Running",
        "hostIP": host_ip,
        **({"podIP": pod_ip} if pod_ip else {}),
        "startTime": now,
        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}],
        "containerStatuses": statuses,
    }
    core.patch_namespaced_pod_status(name, namespace, {"status": status})


def install_litmus_experiment(
    api: Any, namespace: str, name: str, env: tuple[str, ...] = ()
) -> None:
    """The ChaosExperiment `name` in `namespace`, as installed from the ChaosHub (Litmus runs
    only experiments installed in the engine's namespace), declaring the variables `env` (an
    engine's variables override the experiment's of the same name)."""
    from kubernetes import client

    definition: dict[str, Any] = {"scope": "Namespaced", "image": "litmuschaos/go-runner:3.0.0"}
    if env:
        definition["env"] = [{"name": variable, "value": ""} for variable in env]

    client.CustomObjectsApi(api).create_namespaced_custom_object(
        "litmuschaos.io",
        "v1alpha1",
        namespace,
        "chaosexperiments",
        {
            "apiVersion": "litmuschaos.io/v1alpha1",
            "kind": "ChaosExperiment",
            "metadata": {"name": name},
            "spec": {"definition": definition},
        },
    )


def experiment(
    kubeconfig: Path, namespace: str, faults: list[dict[str, Any]], **platform: Any
) -> Experiment:
    members = ",".join(f"mongo-{i}.mongo.{namespace}.svc:27017" for i in range(3))
    return Experiment.model_validate(
        {
            "name": "k8s-test",
            "target": {
                "platform": "kubernetes",
                "uri": f"mongodb://{members}/?replicaSet=rs0",
                "kubernetes": {
                    "kubeconfig": str(kubeconfig),
                    "namespace": namespace,
                    "wait": "5s",
                    **platform,
                },
            },
            # These tests are about what each engine does, the approximate and one-way ways
            # too: every fault opts in (tests/integration/test_fault_ways.py tests the opt-ins).
            "faults": [{"approximate": True, "one_way": True, **f} for f in faults],
        }
    )


def member(namespace: str, i: int, name: str = "mongo") -> str:
    """Member `i` of the StatefulSet `name`, by its pod's DNS name."""
    return f"{name}-{i}.{name}.{namespace}.svc:27017"


def rsdrill_objects(api: Any, namespace: str) -> list[tuple[str, str]]:
    """(kind, name) of every chaos object rsdrill created that still exists."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    custom = client.CustomObjectsApi(api)
    found = []
    groups = [("chaos-mesh.org", p) for p in CHAOS_PLURALS] + [("litmuschaos.io", "chaosengines")]
    for group, plural in groups:
        try:
            items = custom.list_namespaced_custom_object(
                group, "v1alpha1", namespace, plural, label_selector=MANAGED
            )["items"]
        except ApiException as exc:
            if exc.status == 404:
                continue
            raise
        found += [(item["kind"], item["metadata"]["name"]) for item in items]
    return found


def service_account_token(api: Any, namespace: str, account: str) -> str:
    """A token of a new ServiceAccount `account` (TokenRequest, an hour)."""
    from kubernetes import client

    client.CoreV1Api(api).create_namespaced_service_account(
        namespace, {"metadata": {"name": account}}
    )
    return token_of(api, namespace, account)


def token_of(api: Any, namespace: str, account: str, audience: str | None = None) -> str:
    """A token of the ServiceAccount `account` (TokenRequest, an hour), for `audience` only when
    given, else for the API server's own audiences."""
    from kubernetes import client

    spec: dict[str, Any] = {"expirationSeconds": 3600}
    if audience is not None:
        spec["audiences"] = [audience]
    answer = client.CoreV1Api(api).create_namespaced_service_account_token(
        account, namespace, {"spec": spec}
    )
    return str(answer.status.token)


def wait_listening(
    port: int,
    process: subprocess.Popen[Any],
    name: str,
    said: Callable[[], str],
    timeout_s: float = 30.0,
) -> None:
    """Until `process` (`name`) listens on loopback `port`; failing with what it `said` if it
    exits first."""
    deadline = time.monotonic() + timeout_s
    while True:
        assert process.poll() is None, f"{name} exited: {said()}"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            assert time.monotonic() < deadline, f"{name} did not listen on port {port}"
            time.sleep(0.1)


@contextmanager
def node_agent(
    kube: Any, namespace: str, cgroup_root: Path, state_dir: Path, allow: str
) -> Iterator[str]:
    """`python -m rsdrill.platforms.kubernetes.nodeagent` on a free loopback port, serving TLS
    with the API server's certificate, under its own ServiceAccount `node-agent` of
    `namespace` (allowed to create TokenReviews, nothing else), admitting the user `allow`
    only, capping cgroups under `cgroup_root`: its URL (its log: `agent_log(state_dir)`)."""
    from kubernetes import client

    token = service_account_token(kube.api, namespace, "node-agent")
    rbac = client.RbacAuthorizationV1Api(kube.api)
    name = f"{namespace}-node-agent"
    rbac.create_cluster_role({
        "metadata": {"name": name},
        "rules": [{"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"],
                   "verbs": ["create"]}],
    })  # fmt: skip
    rbac.create_cluster_role_binding({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": "node-agent", "namespace": namespace}],
    })  # fmt: skip
    kubeconfig = kube.cluster.kubeconfig(f"{namespace}-node-agent", token)
    certs = kube.cluster.directory / "certs"
    tls = (certs / "apiserver.crt", certs / "apiserver.key")
    with node_agent_process(kubeconfig, tls, cgroup_root, state_dir, allow) as url:
        yield url


@contextmanager
def node_agent_process(
    kubeconfig: Path, tls: tuple[Path, Path], cgroup_root: Path, state_dir: Path, allow: str
) -> Iterator[str]:
    """The node agent's process on a free loopback port, serving TLS with (certificate, key),
    reviewing tokens through `kubeconfig`: its URL. What it logs (stderr) is in
    `agent_log(state_dir)`."""
    from tests.kubernetes.cluster import REPO, env_without_kube, free_port

    port = free_port()
    log = agent_log(state_dir)
    with log.open("w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "rsdrill.platforms.kubernetes.nodeagent",
             "--listen", f"127.0.0.1:{port}", "--allow", allow,
             "--tls-cert", str(tls[0]), "--tls-key", str(tls[1]),
             "--cgroup-root", str(cgroup_root), "--state-dir", str(state_dir),
             "--kubeconfig", str(kubeconfig)],
            stdout=subprocess.DEVNULL, stderr=stderr, text=True, cwd=REPO,
            env=env_without_kube(),
        )  # fmt: skip
    try:
        wait_listening(port, process, "the node agent", log.read_text)
        yield f"https://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)


def agent_log(state_dir: Path) -> Path:
    """Where `node_agent_process` with `state_dir` keeps the agent's log."""
    return state_dir.with_name(f"{state_dir.name}.log")
