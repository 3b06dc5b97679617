"""Chaos Mesh's real controller-manager (built from its Go module by .ci/install-chaos-mesh) run
against a test cluster as its Helm chart installs it, the chart rendered by helm (built from
the same module graph): Chaos Mesh's own CRDs, all of them (the controller watches every kind);
the controller's ServiceAccount and RBAC, from the chart; its admission webhooks (mutating,
validating, and the authorization check), from the chart, reaching the controller's webhook
server at a loopback URL with a certificate made here; the controller as a process with the
chart's environment, but for addresses, ports and the paths of the daemon's certificates.

Chaos Mesh's chaos-daemon needs a container runtime to enter, which the test cluster has not: a
stand-in (tests/kubernetes/standin_daemon, compiled against Chaos Mesh's own gRPC service)
answers the controller's calls and records them (`StandinDaemon`). The controller finds it as it
finds the daemon: an EndpointSlice `chaos-daemon-*` in its namespace naming, for each node, the
daemon's address, which may not be loopback; so the stand-in serves in a network namespace the
test makes, joined to this one by a veth pair. It serves the daemon's mutual TLS (the chart's
default) with certificates the test makes as the chart would. A container whose data volume a
test put on faultfs (`StandinDaemon.attach`) gets an IOChaos or BlockChaos as faultfs rules on
it: the stand-in acts there, from its namespace, on this one's faultfs control sockets.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.harness.processes import installed
from tests.kubernetes.cluster import BIN, REPO, KubeCluster, free_port, openssl
from tests.kubernetes.controllers import Loop, told

INSTALL = REPO / ".ci" / "install-chaos-mesh"
SOURCE = REPO / ".cache" / "tools" / "src" / "chaos-mesh"
NAMESPACE = "chaos-mesh"


def install() -> Path:
    """The controller-manager's binary; built once (.ci/install-chaos-mesh), loudly if not."""
    installed(INSTALL)
    return BIN / "chaos-controller-manager"


def crds() -> list[Path]:
    """Every CRD of the built Chaos Mesh version, from its own source."""
    install()
    return sorted((SOURCE / "config" / "crd" / "bases").glob("*.yaml"))


def chart() -> list[dict[str, Any]]:
    """The chart's objects as `helm template` renders them for release chaos-mesh."""
    install()
    helm, source = str(BIN / "helm-chaos-mesh"), str(SOURCE / "helm" / "chaos-mesh")
    done = subprocess.run(
        [helm, "template", "chaos-mesh", source, "--namespace", NAMESPACE],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def _controller_part(doc: dict[str, Any]) -> bool:
    """The controller-manager's account and RBAC in the chart."""
    kinds = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
    return doc["kind"] in kinds and "chaos-controller-manager" in doc["metadata"]["name"]


def _webhooks(doc: dict[str, Any], url: str, ca: bytes) -> dict[str, Any]:
    """A webhook configuration of the chart, each hook sent to `url` + its service path."""
    for hook in doc["webhooks"]:
        path = hook["clientConfig"]["service"]["path"]
        hook["clientConfig"] = {"url": f"{url}{path}", "caBundle": base64.b64encode(ca).decode()}
    return doc


def _environment(objects: list[dict[str, Any]]) -> dict[str, str]:
    """The chart's environment of the controller's container (its namespace filled in)."""
    [deployment] = [o for o in objects if o["kind"] == "Deployment"
                    and o["metadata"]["name"] == "chaos-controller-manager"]  # fmt: skip
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    env = {}
    for variable in container["env"]:
        if "value" in variable:
            env[variable["name"]] = str(variable["value"])
        elif variable["valueFrom"].get("fieldRef", {}).get("fieldPath") == "metadata.namespace":
            env[variable["name"]] = NAMESPACE
    return env


@contextmanager
def controller_manager(
    cluster: KubeCluster, api: Any, daemon: StandinDaemon | None
) -> Iterator[subprocess.Popen[bytes]]:
    """Chaos Mesh installed from its chart (see the module's docstring) and its controller-manager
    running under its own ServiceAccount, calling `daemon` with the chart's mTLS; killed on
    leaving."""
    from tests.kubernetes.cluster import server_side_apply
    from tests.kubernetes.support import service_account_token, wait_listening

    binary = install()
    objects = chart()
    certs = cluster.directory / "chaos-mesh-certs"
    certs.mkdir(exist_ok=True)
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-keyout", str(certs / "tls.key"), "-out", str(certs / "tls.crt"),
            "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1")  # fmt: skip
    webhook_port = free_port()
    rbac = [o for o in objects if _controller_part(o) and o["kind"] != "ServiceAccount"]
    errors = server_side_apply(api, rbac, NAMESPACE, dry_run=False)
    assert not errors, errors
    token = service_account_token(api, NAMESPACE, "chaos-controller-manager")
    kubeconfig = cluster.kubeconfig("chaos-controller-manager", token)
    env = {
        **{k: v for k, v in os.environ.items() if k != "KUBECONFIG"},
        **_environment(objects),
        "KUBECONFIG": str(kubeconfig),
        "CERTS_DIR": str(certs),
        "WEBHOOK_HOST": "127.0.0.1",
        "WEBHOOK_PORT": str(webhook_port),
        "METRICS_HOST": "127.0.0.1",
        "METRICS_PORT": str(free_port()),
        "PPROF_ADDR": "0",
    }
    for name in [
        n for n in env if n.startswith(("CHAOS_DAEMON_CLIENT", "CHAOS_MESH_CA", "CHAOSD_"))
    ]:
        if name.endswith(("CERT", "KEY")):
            del env[name]  # the chart's paths in its pod
    if daemon is not None:  # the chart's variables, at the files the test made
        env["CHAOS_MESH_CA_CERT"] = str(daemon.ca)
        env["CHAOS_DAEMON_CLIENT_CERT"] = env["CHAOS_DAEMON_CLIENT_KEY"] = str(daemon.client)
    log = cluster.directory / "logs" / "chaos-controller-manager.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(binary)], env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        # Its webhook server serves once its caches are in: then the hooks can go in.
        wait_listening(webhook_port, process, "chaos-controller-manager",
                       lambda: log.read_text()[-3000:], timeout_s=60)  # fmt: skip
        hooks = [_webhooks(o, f"https://127.0.0.1:{webhook_port}", (certs / "tls.crt").read_bytes())
                 for o in objects if o["kind"].endswith("WebhookConfiguration")]  # fmt: skip
        errors = server_side_apply(api, hooks, NAMESPACE, dry_run=False)
        assert not errors, errors
        yield process
    finally:
        # It takes its time over SIGTERM (its informers wind down): a test needs it gone.
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


DAEMON_PORT = 31767  # the chart's chaosDaemon.grpcPort, which the controller dials
DAEMON_SERVER_NAME = "chaos-daemon.chaos-mesh.org"  # the name the controller verifies


@dataclass
class StandinDaemon:
    address: str
    record: Path
    ca: Path  # the CA of the chart's mTLS between the controller and the daemon
    client: Path  # the controller's certificate and key, signed by it
    volumes: Path  # container id → the faultfs mount of its data volume (read at each call)

    def attach(self, container_id: str, mountpoint: Path) -> None:
        """The container's data volume is the faultfs mount at `mountpoint` from now on."""
        self._write_volumes({**self._read_volumes(), container_id: str(mountpoint)})

    def _read_volumes(self) -> dict[str, str]:
        return dict(json.loads(self.volumes.read_text())) if self.volumes.exists() else {}

    def _write_volumes(self, mounts: dict[str, str]) -> None:
        fresh = self.volumes.with_suffix(".tmp")
        fresh.write_text(json.dumps(mounts))
        fresh.replace(self.volumes)  # the daemon never reads half a file

    def calls(self) -> list[dict[str, Any]]:
        """Every call the controller made on the daemon so far, oldest first: {"method",
        "request" (the gRPC request as JSON), "at"}."""
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines() if line]


def _daemon_certificates(directory: Path) -> tuple[Path, Path, Path]:
    """As the chart makes them for its mTLS (chaosDaemon.mtls.enabled, the default): a CA, the
    daemon's certificate for DAEMON_SERVER_NAME and the controller's client certificate."""
    from rsdrill.sandbox.certs import issue, new_authority

    directory.mkdir(exist_ok=True)
    authority = new_authority("chaos-mesh test CA")
    ca, daemon, client = directory / "ca.crt", directory / "daemon.pem", directory / "client.pem"
    ca.write_bytes(authority.pem())
    daemon.write_bytes(issue(authority, f"CN={DAEMON_SERVER_NAME}", hosts=[DAEMON_SERVER_NAME],
                             server=True))  # fmt: skip
    client.write_bytes(issue(authority, "CN=chaos-controller-manager"))
    return ca, daemon, client


class DaemonEndpoints(Loop):
    """As the endpoint controller over the daemon's DaemonSet: the EndpointSlice the controller
    reads names the daemon for every node there is (nodes come and go with the tests)."""

    def __init__(self, api: Any, address: str) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(api)
        # Woken by the nodes' watch events (every second besides), as the endpoint controller.
        super().__init__("chaos-daemon-endpoints", interval_s=1.0, watched=(self.core.list_node,))
        self.discovery = client.DiscoveryV1Api(api)
        self.address = address
        self._nodes: list[str] | None = None

    def tick(self) -> None:
        nodes = sorted(node.metadata.name for node in self.core.list_node().items)
        if nodes == self._nodes:
            return
        body = {
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "chaos-daemon-standin", "namespace": NAMESPACE},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [self.address], "nodeName": node,
                           "conditions": {"ready": True}} for node in nodes],
            "ports": [{"name": "grpc", "port": DAEMON_PORT, "protocol": "TCP"}],
        }  # fmt: skip
        if self._nodes is None:
            self.discovery.create_namespaced_endpoint_slice(NAMESPACE, body)
        else:
            self.discovery.replace_namespaced_endpoint_slice(
                "chaos-daemon-standin", NAMESPACE, body
            )
        self._nodes = nodes


def can_serve_daemon() -> bool:
    """Whether this machine lets the test make the daemon's network namespace."""
    return os.geteuid() == 0 and shutil.which("ip") is not None


@contextmanager
def standin_daemon(cluster: KubeCluster, api: Any) -> Iterator[StandinDaemon]:
    """The stand-in daemon serving in a network namespace of its own (see the module's
    docstring), and the EndpointSlice that names it; all gone on leaving."""
    from tests.harness.members import wait_until

    install()
    tag = f"{os.getpid() % 100_000}"
    netns, outside, inside = f"rsdcd{tag}", f"rsdcd{tag}o", f"rsdcd{tag}i"
    block = os.getpid() % 16_384  # a /30 of its own in 10.251.0.0/16
    host, daemon_ip = (f"10.251.{block // 64}.{block % 64 * 4 + n}" for n in (1, 2))

    def ip(*argv: str) -> None:
        subprocess.run(["ip", *argv], check=True, capture_output=True)

    ip("netns", "add", netns)
    process = None
    try:
        ip("link", "add", outside, "type", "veth", "peer", "name", inside, "netns", netns)
        ip("addr", "add", f"{host}/30", "dev", outside)
        ip("link", "set", outside, "up")
        ip("-n", netns, "addr", "add", f"{daemon_ip}/30", "dev", inside)
        ip("-n", netns, "link", "set", inside, "up")
        record = cluster.directory / "chaos-daemon-calls.jsonl"
        volumes = cluster.directory / "chaos-daemon-volumes.json"
        log = cluster.directory / "logs" / "standin-chaos-daemon.log"
        ca, certificate, client = _daemon_certificates(cluster.directory / "chaos-daemon-certs")
        with log.open("wb") as out:
            process = subprocess.Popen(
                ["ip", "netns", "exec", netns, str(BIN / "standin-chaos-daemon"),
                 "-listen", f"{daemon_ip}:{DAEMON_PORT}", "-record", str(record),
                 "-ca", str(ca), "-cert", str(certificate), "-volumes", str(volumes),
                 "-netns", f"/proc/{os.getpid()}/ns/net"],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        wait_until(lambda: "serving on" in log.read_text() or process.poll() is not None,
                   10, "the stand-in daemon serving")  # fmt: skip
        assert process.poll() is None, log.read_text()
        endpoints = DaemonEndpoints(api, daemon_ip).start()
        try:
            yield StandinDaemon(daemon_ip, record, ca, client, volumes)
        finally:
            endpoints.stop()
        assert not endpoints.errors, told(endpoints.errors)
    finally:
        if process is not None and process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
        subprocess.run(["ip", "netns", "del", netns], check=False, capture_output=True)
