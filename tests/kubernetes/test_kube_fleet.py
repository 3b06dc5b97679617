"""The fleet's store in a namespace of a real kube-apiserver (`RSDRILL_FLEET=kubernetes://NS`):
the stop lever as a ConfigMap of signed events, moved by `rsdrill lever` and honoured by
`rsdrill run`; each cluster's lease a coordination.k8s.io Lease that one of six racing runs
takes (free, expired, released); an identity RBAC gives nothing is refused, exit 2."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from rsdrill.fleet.kubernetes import LEVER_CONFIGMAP, RECORD, KubeFleetStore, lease_name
from rsdrill.fleet.lease import ClusterLease
from rsdrill.fleet.store import FleetStoreError
from tests.harness.cli import rsdrill_run
from tests.harness.leases import Before, race_after
from tests.kubernetes.conftest import Kube

KEY = "fleet-key-for-the-kube-tests-0123"
CLUSTER = "10.0.0.1:27017,10.0.0.2:27017,10.0.0.3:27017"


def _store(kube: Kube, namespace: str, monkeypatch: pytest.MonkeyPatch) -> KubeFleetStore:
    monkeypatch.setenv("KUBECONFIG", str(kube.admin))
    return KubeFleetStore(f"kubernetes://{namespace}")


def _cli(*args: str, kubeconfig: Path, namespace: str, tmp_path: Path,
         key: str | None = KEY) -> subprocess.CompletedProcess[str]:  # fmt: skip
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "RSDRILL_FLEET": f"kubernetes://{namespace}",
           "RSDRILL_HOME": str(tmp_path / "home")}  # fmt: skip
    for name in ("RSDRILL_HISTORY", "RSDRILL_FLEET_KEY", "RSDRILL_FLEET_KEY_FILE"):
        env.pop(name, None)
    if key is not None:
        env["RSDRILL_FLEET_KEY"] = key
    return rsdrill_run([*args], capture_output=True,
                       text=True, timeout=120, env=env)  # fmt: skip


def test_the_lever_in_a_configmap_stops_runs_from_starting(kube: Kube, tmp_path: Path) -> None:
    from kubernetes import client

    namespace = kube.namespace("fleet-lever")
    cli = {"kubeconfig": kube.admin, "namespace": namespace, "tmp_path": tmp_path}
    engaged = _cli("lever", "engage", "--reason", "cluster upgrade", **cli)
    assert engaged.returncode == 0, engaged.stderr
    assert f"kubernetes://{namespace}" in engaged.stdout
    status = _cli("lever", "status", **cli)
    assert status.returncode == 5 and "cluster upgrade" in status.stdout, status.stdout
    # A run under the lever does not start (nothing is built: the lever is read first).
    experiment = tmp_path / "e.yaml"
    experiment.write_text("name: lever-test\ntarget: {platform: sandbox, topology: rs1}\n"
                          "faults:\n  - {at: 1s, kind: host-kill, select: primary, "
                          "duration: 2s}\n")  # fmt: skip
    refused = _cli("run", str(experiment), "--out", str(tmp_path / "out"), "--no-live", **cli)
    assert refused.returncode == 5 and "not started" in refused.stderr, refused.stderr
    assert not (tmp_path / "out" / "sandbox").exists()
    # Someone who may write the ConfigMap but lacks the key cannot disengage it.
    core = client.CoreV1Api(kube.api)
    core.patch_namespaced_config_map(
        LEVER_CONFIGMAP,
        namespace,
        {"data": {"99999999999999999999-forged": '{"engaged": false, "at": "9999-12-31"}'}},
    )
    status = _cli("lever", "status", **cli)
    assert status.returncode == 5 and "1 newer record(s) not signed" in status.stdout
    disengaged = _cli("lever", "disengage", **cli)
    assert disengaged.returncode == 0, disengaged.stderr
    assert _cli("lever", "status", **cli).returncode == 0
    events = core.read_namespaced_config_map(LEVER_CONFIGMAP, namespace).data
    assert len(events) == 3  # engage, the forged one, disengage: none overwritten
    # Nor move it by copying a genuine old event under a newer key: its signed time is old.
    old = next(text for text in events.values() if '"engaged": false' in text
               and "signature" in text)  # fmt: skip
    assert _cli("lever", "engage", "--reason", "again", **cli).returncode == 0
    core.patch_namespaced_config_map(LEVER_CONFIGMAP, namespace,
                                     {"data": {"99999999999999999999-replayed": old}})  # fmt: skip
    status = _cli("lever", "status", **cli)
    assert status.returncode == 5 and "again" in status.stdout, status.stdout
    # Without the key, a shared store is refused.
    keyless = _cli("lever", "status", key=None, **cli)
    assert keyless.returncode == 2 and "RSDRILL_FLEET_KEY" in keyless.stderr


def test_an_identity_rbac_gives_nothing_is_refused(kube: Kube, tmp_path: Path) -> None:
    namespace = kube.namespace("fleet-denied")
    denied = _cli("lever", "status", kubeconfig=kube.restricted, namespace=namespace,
                  tmp_path=tmp_path)  # fmt: skip
    assert denied.returncode == 2, denied.stdout + denied.stderr
    assert "forbidden" in denied.stderr and "Traceback" not in denied.stderr
    assert len(denied.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("before", ["none", "expired", "released"])
def test_runs_racing_for_a_cluster_get_one_kubernetes_lease(
    kube: Kube, monkeypatch: pytest.MonkeyPatch, before: Before
) -> None:
    from kubernetes import client

    namespace = kube.namespace("fleet-lease")
    store = _store(kube, namespace, monkeypatch)
    key = KEY.encode()
    for round_ in range(3):
        cluster = f"{CLUSTER}/{round_}"
        won = race_after(store, lambda: store, key, cluster, before)
        lease = client.CoordinationV1Api(kube.api).read_namespaced_lease(
            lease_name(cluster), namespace
        )
        assert lease.spec.holder_identity.startswith(f"{won.record['experiment']} on ")
        assert won.record["token"] in lease.metadata.annotations[RECORD]
        won.release()
        assert store.lease(cluster) is None
        assert (
            client.CoordinationV1Api(kube.api)
            .read_namespaced_lease(lease_name(cluster), namespace)
            .spec.holder_identity
            is None
        )


def test_a_schedule_s_account_may_use_the_fleet_namespace_and_no_more(
    kube: Kube, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`rsdrill schedule render --fleet kubernetes://NS`, applied for real: the CronJob's
    ServiceAccount can move the lever and take a lease in NS (the Role rendered is enough),
    and nothing of the fleet's in another namespace."""
    import yaml
    from typer.testing import CliRunner

    from rsdrill.cli.app import app
    from tests.kubernetes.cluster import server_side_apply
    from tests.kubernetes.test_kube_manifests import _experiment_file

    namespace, fleet = kube.namespace("schedule-fleet"), kube.namespace("fleet")
    kill = {"at": "5s", "kind": "host-kill", "engine": "chaos-mesh", "duration": "20s"}
    path = _experiment_file(tmp_path, namespace, [kill])
    done = CliRunner().invoke(
        app,
        [
            "schedule",
            "render",
            "--cron",
            "@daily",
            "--namespace",
            namespace,
            "--fleet",
            f"kubernetes://{fleet}",
            str(path),
        ],
    )
    assert done.exit_code == 0, done.stderr
    docs = [d for d in yaml.safe_load_all(done.stdout) if d]
    assert server_side_apply(kube.api, docs, namespace, dry_run=False) == []
    monkeypatch.setenv("KUBECONFIG", str(kube.account_kubeconfig(namespace, "rsdrill-nightly")))
    key = KEY.encode()

    from rsdrill.fleet import lever

    store = KubeFleetStore(f"kubernetes://{fleet}")
    lever.engage(store, key, "as the nightly account")
    assert lever.state(store, key).engaged
    lease = ClusterLease(store, key, CLUSTER, "nightly")
    lease.take()
    lease.release()
    assert store.lease(CLUSTER) is None
    elsewhere = KubeFleetStore(f"kubernetes://{namespace}")
    with pytest.raises(FleetStoreError, match="forbidden"):
        lever.engage(elsewhere, key, "not its namespace")
