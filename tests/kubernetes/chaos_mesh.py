"""Chaos Mesh's real controller-manager (built from its Go module by .ci/install-chaos-mesh) run
against a test cluster as its Helm chart installs it, the chart rendered by helm (built from
the same module graph): Chaos Mesh's own CRDs, all of them (the controller watches every kind);
the controller's ServiceAccount and RBAC, from the chart; its admission webhooks (mutating,
validating, and the authorization check), from the chart, reaching the controller's webhook
server at a loopback URL with a certificate made here; the controller as a process with the
chart's environment, but for addresses, ports and the daemon's client certificates.

No chaos-daemon runs: it acts on PodChaos pod-kill and pod-failure, which need none; a kind that
needs the daemon is recorded as failed.
"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from tests.kubernetes.cluster import BIN, REPO, KubeCluster, free_port, openssl

INSTALL = REPO / ".ci" / "install-chaos-mesh"
SOURCE = REPO / ".cache" / "tools" / "src" / "chaos-mesh"
NAMESPACE = "chaos-mesh"


def install() -> Path:
    """The controller-manager's binary; built once (.ci/install-chaos-mesh), loudly if not."""
    binary = BIN / "chaos-controller-manager"
    needed = [binary, BIN / "helm-chaos-mesh", SOURCE / "config" / "crd" / "bases"]
    if not all(path.exists() for path in needed):
        done = subprocess.run(["bash", str(INSTALL)], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f".ci/install-chaos-mesh failed:\n{done.stdout}\n{done.stderr}")
    return binary


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
def controller_manager(cluster: KubeCluster, api: Any) -> Iterator[subprocess.Popen[bytes]]:
    """Chaos Mesh installed from its chart (see the module's docstring) and its controller-manager
    running under its own ServiceAccount; killed on leaving."""
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
            del env[name]  # no daemon, no certificates for it
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
