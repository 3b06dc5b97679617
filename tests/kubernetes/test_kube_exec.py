"""host-freeze (engine native) against the real API server: the pods/exec call rsdrill makes,
as the server relays it towards the pod's kubelet, and how the server's failure to reach a
kubelet is reported. No kubelet runs here: a node's kubelet endpoint is a TLS listener of the
test's that records the request the API server sends it and refuses it."""

from __future__ import annotations

import socket
import ssl
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rsdrill.platforms.base import InjectionError
from rsdrill.platforms.kubernetes.client import ClusterAccess, Kube, KubeError
from rsdrill.platforms.kubernetes.freeze import freeze_command
from rsdrill.platforms.kubernetes.preflight import Permission, needed_permissions
from rsdrill.platforms.kubernetes.target import make_target
from tests.harness.injectors import pod_injector
from tests.kubernetes.conftest import Kube as KubeFixture
from tests.kubernetes.support import experiment, make_pod, member

FREEZE = {"at": "1s", "kind": "host-freeze", "duration": "5s"}
KUBELET_SAYS = "stand-in kubelet: no container runtime here"
_STATUS = (
    '{"kind":"Status","apiVersion":"v1","status":"Failure","code":503,'
    f'"reason":"ServiceUnavailable","message":"{KUBELET_SAYS}"}}'
)
REFUSAL = (
    "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
    f"Content-Length: {len(_STATUS)}\r\n\r\n{_STATUS}"
).encode()


@dataclass
class StandInKubelet:
    """A TLS listener where a node's kubelet would be: keeps each request line it receives
    and refuses it with a Status, as a kubelet does."""

    port: int
    requests: list[str] = field(default_factory=list)


@pytest.fixture
def kubelet_endpoint(kube: KubeFixture) -> Iterator[StandInKubelet]:
    certs = kube.cluster.directory / "certs"
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certs / "apiserver.crt", certs / "apiserver.key")
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    endpoint = StandInKubelet(listener.getsockname()[1])
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                raw, _ = listener.accept()
            except TimeoutError:
                continue
            try:
                with context.wrap_socket(raw, server_side=True) as conn:
                    conn.settimeout(5)
                    head = conn.recv(65536).decode("latin-1")
                    endpoint.requests.append(head.split("\r\n", 1)[0])
                    conn.sendall(REFUSAL)
            except (OSError, ssl.SSLError):
                continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield endpoint
    stop.set()
    thread.join(timeout=5)
    listener.close()


def _node(kube: KubeFixture, name: str, port: int | None) -> None:
    """A Node object; with `port`, its kubelet at 127.0.0.1:port as the kubelet reports it."""
    from kubernetes import client

    core = client.CoreV1Api(kube.api)
    core.create_node({"metadata": {"name": name}})
    if port is not None:
        status = {
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
        }
        core.patch_node_status(name, {"status": status})


def test_exec_goes_to_the_pods_kubelet_with_the_freeze_command(
    kube: KubeFixture, kubelet_endpoint: StandInKubelet, tmp_path: Path
) -> None:
    namespace = kube.namespace("exec")
    node = f"{namespace}-node"
    _node(kube, node, kubelet_endpoint.port)
    make_pod(kube.api, namespace, "mongo-0", node)
    client = Kube(ClusterAccess(str(kube.admin)))
    try:
        with pytest.raises(KubeError) as refused:
            client.exec(namespace, "mongo-0", "mongod", freeze_command())
    finally:
        client.close()
    [request] = kubelet_endpoint.requests
    method, target, _ = request.split(" ")
    url = urllib.parse.urlsplit(target)
    assert url.path == f"/exec/{namespace}/mongo-0/mongod"
    query = urllib.parse.parse_qs(url.query)
    assert query["command"] == freeze_command()
    assert query.get("output") == ["1"] and query.get("error") == ["1"]
    assert "input" not in query and "tty" not in query
    assert method == "POST"  # the API server speaks SPDY to kubelets, whatever the client used
    # The kubelet's refusal, as the server relays it, is the error's message.
    assert str(refused.value) == f"{KUBELET_SAYS} in pod {namespace}/mongo-0"
    assert refused.value.status == 503


def test_no_kubelet_to_reach_is_an_injection_error_naming_the_server_message(
    kube: KubeFixture, tmp_path: Path
) -> None:
    namespace = kube.namespace("exec-nokubelet")
    node = f"{namespace}-node"
    _node(kube, node, None)  # a node without addresses: no kubelet the server can dial
    make_pod(kube.api, namespace, "mongo-0", node)
    target = make_target(experiment(kube.admin, namespace, [FREEZE]), tmp_path)
    injector = pod_injector(target, target.faults[0], member(namespace, 0))
    assert injector.revert_action()["action"] == "kubernetes.exec-thaw"
    with pytest.raises(InjectionError) as refused:
        injector.inject()
    message = str(refused.value)
    assert message.startswith(f"host-freeze of pod {namespace}/mongo-0 through pods/exec: ")
    assert "no preferred addresses found" in message, message
    target.teardown()


def test_exec_needs_the_pods_exec_permission(kube: KubeFixture, tmp_path: Path) -> None:
    """The restricted identity is refused by RBAC, with the server's message; and the
    preflight asks for exactly the pods/exec verbs."""
    namespace = kube.namespace("exec-rbac")
    node = f"{namespace}-node"
    _node(kube, node, None)
    make_pod(kube.api, namespace, "mongo-0", node)
    client = Kube(ClusterAccess(str(kube.restricted)))
    try:
        with pytest.raises(KubeError) as refused:
            client.exec(namespace, "mongo-0", "mongod", ["true"])
    finally:
        client.close()
    assert refused.value.status == 403
    assert 'cannot get resource "pods/exec"' in str(refused.value) or (
        'cannot create resource "pods/exec"' in str(refused.value)
    ), str(refused.value)
    exp = experiment(kube.admin, namespace, [FREEZE])
    assert exp.target.kubernetes is not None
    assert needed_permissions(exp.target.kubernetes, exp.faults, block_chaos=False) == [
        Permission("get", "pods", "", namespace),
        Permission("get", "pods", "", namespace, "exec"),
        Permission("create", "pods", "", namespace, "exec"),
    ]
