"""A real Kubernetes control plane for the tests: Debian's etcd, and kube-apiserver,
kube-controller-manager and kube-scheduler built from the Go module proxy (.ci/install-kube), on
free loopback ports in a temporary directory.

The API server's authentication (a token file), RBAC authorization, admission and CRD schema
validation are the real ones; so are the controllers (StatefulSet, ReplicaSet, node lifecycle,
garbage collection, service accounts, volume binding, ...) and the scheduler, each under its own
identity and the bootstrap roles the API server gives it. No kubelet runs: the harness in
tests/kubernetes/kubelet.py plays the nodes' heartbeats and their pods' containers.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.harness.processes import installed

REPO = Path(__file__).resolve().parents[2]
INSTALL = REPO / ".ci" / "install-kube"
BIN = REPO / ".cache" / "tools" / "bin"
CRDS = REPO / "tests" / "fixtures" / "crds"
START_TIMEOUT_S = 90.0

ADMIN_TOKEN = "rsdrill-test-admin-token"
RESTRICTED_TOKEN = "rsdrill-test-restricted-token"
# The components' own users: the API server's bootstrap RBAC binds its roles to these names.
COMPONENT_USERS = {
    "kube-controller-manager": "system:kube-controller-manager",
    "kube-scheduler": "system:kube-scheduler",
}


def install() -> Path:
    """The tools' directory; builds them once (.ci/install-kube), failing loudly if it can't."""
    installed(INSTALL)
    return BIN


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


@dataclass
class KubeCluster:
    """A running etcd + kube-apiserver; `kubeconfig(user)` writes a kubeconfig for a user."""

    directory: Path
    server: str
    processes: list[subprocess.Popen[bytes]]
    scratch: Path  # etcd's data, removed once it stopped

    def kubeconfig(self, name: str, token: str) -> Path:
        path = self.directory / f"kubeconfig-{name}"
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "test",
                    "cluster": {
                        "server": self.server,
                        "certificate-authority": str(self.directory / "certs" / "apiserver.crt"),
                    },
                }
            ],
            "users": [{"name": name, "user": {"token": token}}],
            "contexts": [{"name": name, "context": {"cluster": "test", "user": name}}],
            "current-context": name,
        }
        path.write_text(yaml.safe_dump(config))
        return path

    def stop(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                # The controllers keep no state of their own and may take 10 s over SIGTERM.
                if Path(str(process.args[0])).name in COMPONENT_USERS:
                    process.kill()
                else:
                    process.terminate()
        for process in reversed(self.processes):
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        shutil.rmtree(self.scratch, ignore_errors=True)


def start_cluster(directory: Path) -> KubeCluster:
    """etcd, kube-apiserver, kube-controller-manager and kube-scheduler on free loopback ports,
    their files under `directory`."""
    bin_dir = install()
    certs = directory / "certs"
    certs.mkdir(parents=True)
    openssl("genrsa", "-out", str(directory / "sa.key"), "2048")
    openssl("rsa", "-in", str(directory / "sa.key"), "-pubout", "-out", str(directory / "sa.pub"))
    tokens = {component: secrets.token_hex(16) for component in COMPONENT_USERS}
    (directory / "tokens.csv").write_text(
        f'{ADMIN_TOKEN},admin,admin-uid,"system:masters"\n'
        f"{RESTRICTED_TOKEN},restricted,restricted-uid\n"
        + "".join(f"{tokens[c]},{user},{c}-uid\n" for c, user in COMPONENT_USERS.items())
    )
    etcd_port, peer_port, api_port = free_port(), free_port(), free_port()
    # etcd's data on tmpfs when there is one: fsyncs on a shared disk slow every write.
    shm = Path("/dev/shm")
    etcd_dir = Path(tempfile.mkdtemp(prefix="rsdrill-etcd-", dir=shm if shm.is_dir() else None))
    logs = directory / "logs"
    logs.mkdir()
    processes: list[subprocess.Popen[bytes]] = []
    cluster = KubeCluster(directory, f"https://127.0.0.1:{api_port}", processes, etcd_dir)
    try:
        processes.append(
            _spawn(
                [
                    str(bin_dir / "etcd"),
                    "--name",
                    "default",
                    "--data-dir",
                    str(etcd_dir / "data"),
                    "--listen-client-urls",
                    f"http://127.0.0.1:{etcd_port}",
                    "--advertise-client-urls",
                    f"http://127.0.0.1:{etcd_port}",
                    "--listen-peer-urls",
                    f"http://127.0.0.1:{peer_port}",
                    "--initial-advertise-peer-urls",
                    f"http://127.0.0.1:{peer_port}",
                    "--initial-cluster",
                    f"default=http://127.0.0.1:{peer_port}",
                ],
                logs / "etcd.log",
            )
        )
        processes.append(
            _spawn(
                [
                    str(bin_dir / "kube-apiserver"),
                    f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                    "--bind-address=127.0.0.1",
                    "--advertise-address=127.0.0.1",
                    f"--secure-port={api_port}",
                    f"--cert-dir={certs}",
                    f"--token-auth-file={directory / 'tokens.csv'}",
                    "--authorization-mode=RBAC",
                    # As kubeadm sets it: privileged pods (the node agent's DaemonSet) are allowed.
                    "--allow-privileged=true",
                    "--service-account-issuer=https://kubernetes.default.svc",
                    f"--service-account-key-file={directory / 'sa.pub'}",
                    f"--service-account-signing-key-file={directory / 'sa.key'}",
                    "--service-cluster-ip-range=10.96.0.0/24",
                    "--enable-priority-and-fairness=false",
                    "--profiling=false",
                ],
                logs / "kube-apiserver.log",
            )
        )
        _wait_ready(cluster, processes)
        for component, user in COMPONENT_USERS.items():
            kubeconfig = cluster.kubeconfig(user.replace(":", "-"), tokens[component])
            flags = _component_flags(component, directory, kubeconfig)
            processes.append(_spawn([str(bin_dir / component), *flags], logs / f"{component}.log"))
        _wait_ready(cluster, processes, _controllers_acting)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _component_flags(component: str, directory: Path, kubeconfig: Path) -> list[str]:
    """A component's flags: its own kubeconfig, no leader election (one of each) and no
    serving port; the controller-manager signs with the service-account key and gives each
    controller its own ServiceAccount's credentials, as kubeadm sets it up."""
    flags = [f"--kubeconfig={kubeconfig}", "--leader-elect=false", "--secure-port=0"]
    if component == "kube-controller-manager":
        flags += [
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={directory / 'sa.key'}",
            f"--root-ca-file={directory / 'certs' / 'apiserver.crt'}",
            "--controllers=*",
            # The volume controller's binding of a claim can lose a race with its own update
            # of the volume; it tries again on its next pass: every 2 s, not 15 s, here.
            "--pvclaimbinder-sync-period=2s",
            # A node whose kubelet went silent is Unknown after 16 s, not 40: eight of the
            # harness's renewals (kubelet.RENEW_EVERY_S) a grace period, as a kubelet's four.
            "--node-monitor-grace-period=16s",
        ]
    return flags


def _spawn(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _controllers_acting(cluster: KubeCluster) -> bool:
    """The controller-manager's service-account controller has given `default` its account."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    api = api_client(cluster.kubeconfig("admin", ADMIN_TOKEN))
    try:
        client.CoreV1Api(api).read_namespaced_service_account("default", "default")
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    finally:
        api.close()
    return True


def _wait_ready(
    cluster: KubeCluster,
    processes: list[subprocess.Popen[bytes]],
    ready: Callable[[KubeCluster], bool] | None = None,
) -> None:
    """Until the API server answers /readyz (and then `ready`), every process still running."""
    import ssl
    import urllib.request

    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    deadline = time.monotonic() + START_TIMEOUT_S
    request = urllib.request.Request(
        f"{cluster.server}/readyz", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}
    )
    last = ""
    while time.monotonic() < deadline:
        for process in processes:
            if process.poll() is not None:
                log = (cluster.directory / "logs").glob("*.log")
                tails = "\n".join(f"{p.name}: {p.read_text()[-2000:]}" for p in log)
                raise RuntimeError(f"{process.args[0]} exited ({process.returncode}):\n{tails}")
        try:
            with urllib.request.urlopen(request, timeout=2, context=context) as answer:
                if answer.status == 200 and (ready is None or ready(cluster)):
                    return
        except OSError as exc:
            last = str(exc)
        time.sleep(0.25)
    what = "kube-apiserver" if ready is None else ready.__doc__
    raise RuntimeError(f"not ready after {START_TIMEOUT_S:g}s ({what}): {last}")


# -- client-side helpers for tests ---------------------------------------------------------------


def api_client(kubeconfig: Path) -> Any:
    from kubernetes import config

    api = config.new_client_from_config(config_file=str(kubeconfig), persist_config=False)
    # The proxy resolved once (none here): the token's hook resets the host before every
    # call and the host setter reads the proxy variables again by walking os.environ, which
    # from the harness's threads races pytest setting PYTEST_CURRENT_TEST (a KeyError).
    api.configuration.proxy = api.configuration.proxy
    return api


def load_documents(paths: Iterable[Path]) -> list[dict[str, Any]]:
    docs = []
    for path in paths:
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def apply_crds(api: Any, paths: Iterable[Path]) -> None:
    """Create the CRDs (or leave those already there) and wait until each is established."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    ext = client.ApiextensionsV1Api(api)
    docs = load_documents(paths)
    for doc in docs:
        try:
            ext.create_custom_resource_definition(doc)
        except ApiException as exc:
            if exc.status != 409:
                raise
    deadline = time.monotonic() + 30
    for doc in docs:
        name = doc["metadata"]["name"]
        while True:
            crd = ext.read_custom_resource_definition(name)
            conditions = {c.type: c.status for c in crd.status.conditions or []}
            if conditions.get("Established") == "True":
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"CRD {name} not established")
            time.sleep(0.1)
    # Discovery of a new group lags its CRD's Established condition by a moment: wait until
    # it lists each CRD's resource (what rsdrill's preflight asks).
    custom = client.CustomObjectsApi(api)
    for doc in docs:
        spec = doc["spec"]
        for version in (v["name"] for v in spec["versions"] if v.get("served", True)):
            while not _discovered(custom, spec["group"], version, spec["names"]["plural"]):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{spec['group']}/{version} does not list its CRD")
                time.sleep(0.05)


def _discovered(custom: Any, group: str, version: str, plural: str) -> bool:
    from kubernetes.client.rest import ApiException

    try:
        listing = custom.get_api_resources(group, version)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return any(r.name == plural for r in listing.resources or [])


def chaos_mesh_crds(*kinds: str) -> list[Path]:
    return [CRDS / "chaos-mesh" / f"chaos-mesh.org_{kind}.yaml" for kind in kinds]


def litmus_crds() -> list[Path]:
    return sorted((CRDS / "litmus").glob("*.yaml"))


def create_namespace(api: Any, name: str) -> None:
    """A namespace, once the controller-manager has given it its `default` ServiceAccount
    (until then the API server's admission refuses its pods)."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": name}})
    deadline = time.monotonic() + 30
    while True:
        try:
            core.read_namespaced_service_account("default", name)
            return
        except ApiException as exc:
            if exc.status != 404 or time.monotonic() > deadline:
                raise
        time.sleep(0.05)


def server_side_apply(
    api: Any, docs: list[dict[str, Any]], namespace: str, *, dry_run: bool
) -> list[str]:
    """Create each document (server-side dry run when asked); the API's errors, if any."""
    from kubernetes.client.rest import ApiException
    from kubernetes.dynamic import DynamicClient

    dynamic = DynamicClient(api)
    errors = []
    for doc in docs:
        resource = dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        kwargs: dict[str, Any] = {"body": doc}
        if resource.namespaced:
            kwargs["namespace"] = doc.get("metadata", {}).get("namespace") or namespace
        if dry_run:
            kwargs["query_params"] = [("dryRun", "All"), ("fieldValidation", "Strict")]
        else:
            kwargs["query_params"] = [("fieldValidation", "Strict")]
        try:
            resource.create(**kwargs)
        except ApiException as exc:
            errors.append(
                f"{doc['kind']} {doc['metadata'].get('name')}: {exc.status} {_message(exc)}"
            )
    return errors


def _message(exc: Any) -> str:
    import json

    try:
        return str(json.loads(exc.body).get("message"))
    except (TypeError, ValueError, AttributeError):
        return str(exc.reason)


def env_without_kube() -> dict[str, str]:
    """The environment minus KUBECONFIG, so a developer's own cluster is never touched."""
    return {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
