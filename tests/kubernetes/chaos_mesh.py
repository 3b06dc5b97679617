"""Chaos Mesh's real controller-manager (built from its Go module by .ci/install-chaos-mesh) run
against a test cluster: Chaos Mesh's own CRDs, all of them (the controller watches every kind
and stops when one is missing), and the controller as a process with the configuration its
Helm chart gives it through environment variables, leader election off.

Its admission webhooks are not registered, and no chaos-daemon runs: it acts on PodChaos
pod-kill and pod-failure, which need none; a kind that needs the daemon is recorded as failed.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.kubernetes.cluster import BIN, REPO, KubeCluster, free_port, openssl

INSTALL = REPO / ".ci" / "install-chaos-mesh"
SOURCE = REPO / ".cache" / "tools" / "src" / "chaos-mesh"
NAMESPACE = "chaos-mesh"


def install() -> Path:
    """The controller-manager's binary; built once (.ci/install-chaos-mesh), loudly if not."""
    binary = BIN / "chaos-controller-manager"
    if not binary.exists() or not (SOURCE / "config" / "crd" / "bases").is_dir():
        done = subprocess.run(["bash", str(INSTALL)], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f".ci/install-chaos-mesh failed:\n{done.stdout}\n{done.stderr}")
    return binary


def crds() -> list[Path]:
    """Every CRD of the built Chaos Mesh version, from its own source."""
    install()
    return sorted((SOURCE / "config" / "crd" / "bases").glob("*.yaml"))


@contextmanager
def controller_manager(cluster: KubeCluster, kubeconfig: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The controller-manager, cluster-scoped, as `kubeconfig`'s user; killed on leaving."""
    binary = install()
    certs = cluster.directory / "chaos-mesh-certs"
    certs.mkdir(exist_ok=True)
    # Its webhook server needs a certificate to start, though no webhook is registered.
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
             "-keyout", str(certs / "tls.key"), "-out", str(certs / "tls.crt"),
             "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1")  # fmt: skip
    env = {
        **{k: v for k, v in os.environ.items() if k != "KUBECONFIG"},
        "KUBECONFIG": str(kubeconfig),
        "NAMESPACE": NAMESPACE,
        "TEMPLATE_NAMESPACE": NAMESPACE,
        "CLUSTER_SCOPED": "true",
        "ENABLE_LEADER_ELECTION": "false",
        "CERTS_DIR": str(certs),
        "WEBHOOK_HOST": "127.0.0.1",
        "WEBHOOK_PORT": str(free_port()),
        "METRICS_HOST": "127.0.0.1",
        "METRICS_PORT": str(free_port()),
        "TEMPLATE_LABELS": "app.kubernetes.io/component:template",
        "CONFIGMAP_LABELS": "app.kubernetes.io/component:webhook",
        "TZ": "UTC",
    }
    log = cluster.directory / "logs" / "chaos-controller-manager.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(binary)], env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        yield process
    finally:
        # It takes its time over SIGTERM (its informers wind down): a test needs it gone.
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
