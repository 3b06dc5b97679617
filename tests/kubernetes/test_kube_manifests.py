"""manifests/ and `rsdrill schedule render` against the real API server: every overlay and the
rendered schedule pass a server-side dry run (with strict field validation), the rendered RBAC
is enough for the scheduled experiments' preflight, and no secret is written out."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from rsdrill.cli.app import app
from rsdrill.platforms.kubernetes.target import make_target
from tests.kubernetes.cluster import server_side_apply
from tests.kubernetes.conftest import Kube
from tests.kubernetes.manifests_support import (
    MANIFESTS,
    NIGHTLY,
    RBAC,
    kustomize,
    nightly_text,
    rbac_text,
)

OVERLAYS = sorted(p.name for p in (MANIFESTS / "overlays").iterdir())


def test_generated_manifests_match_the_code() -> None:
    hint = "regenerate: python -m tests.kubernetes.manifests_support"
    assert RBAC.read_text() == rbac_text(), hint
    assert NIGHTLY.read_text() == nightly_text(), hint


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_passes_a_server_side_dry_run(kube: Kube, overlay: str) -> None:
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    docs = kustomize(MANIFESTS / "overlays" / overlay)
    core = client.CoreV1Api(kube.api)
    try:  # its objects go to namespace rsdrill, which a dry run of the Namespace cannot make
        core.create_namespace({"metadata": {"name": "rsdrill"}})
    except ApiException as exc:
        assert exc.status == 409
    kinds = sorted(d["kind"] for d in docs)
    assert {
        "StatefulSet",
        "Service",
        "Job",
        "PodDisruptionBudget",
        "CronJob",
        "ConfigMap",
        "PersistentVolumeClaim",
        "ServiceAccount",
        "Role",
        "ClusterRole",
    } <= set(kinds)
    errors = server_side_apply(
        kube.api, [d for d in docs if d["kind"] != "Namespace"], "rsdrill", dry_run=True
    )
    assert errors == []
    statefulset = next(d for d in docs if d["kind"] == "StatefulSet")
    replicas = 1 if overlay.startswith("rs1") else 3
    assert statefulset["spec"]["replicas"] == replicas
    assert ("volumeClaimTemplates" in statefulset["spec"]) == overlay.endswith("-pvc")
    members = next(d for d in docs if d["kind"] == "Job")["spec"]["template"]["spec"]["containers"][
        0
    ]["env"][1]["value"]
    assert len(members.split(",")) == replicas


@dataclass
class Rendered:
    returncode: int
    stdout: str
    stderr: str


def _render(*args: str, env: dict[str, str] | None = None) -> Rendered:
    result = CliRunner().invoke(app, ["schedule", "render", *args], env=env)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return Rendered(result.exit_code, result.stdout, result.stderr)


def _experiment_file(tmp: Path, namespace: str, faults: list[dict[str, Any]]) -> Path:
    path = tmp / f"nightly-{len(faults)}.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": "nightly-primary-kill",
                "target": {
                    "platform": "kubernetes",
                    "uri": f"mongodb://rsdrill:${{MONGO_PASSWORD}}@mongo-0.mongo.{namespace}.svc"
                    ":27017/?replicaSet=rs0",
                    "kubernetes": {"namespace": namespace},
                },
                "faults": faults,
                "slo": {"write_unavailable_s": "<= 15"},
            }
        )
    )
    return path


def test_rendered_schedule_applies_and_grants_what_its_runs_need(
    kube: Kube, tmp_path: Path
) -> None:
    from kubernetes import client

    namespace = kube.namespace("schedule")
    faults = [
        {"at": "5s", "kind": "host-kill", "engine": "chaos-mesh", "duration": "20s"},
        {"at": "60s", "kind": "host-kill", "scope": "node", "duration": "20s", "one_way": True},
        {"at": "90s", "kind": "iops-throttle", "iops": 100, "duration": "30s", "approximate": True},
    ]
    path = _experiment_file(tmp_path, namespace, faults)
    env = {"MONGO_PASSWORD": "s3cret-never-rendered"}
    rendered = _render(
        "--cron",
        "0 2 * * *",
        "--namespace",
        namespace,
        "--image",
        "registry.example/rsdrill:1",
        str(path),
        env=env,
    )
    assert rendered.returncode == 0, rendered.stderr
    assert "s3cret" not in rendered.stdout
    docs = [d for d in yaml.safe_load_all(rendered.stdout) if d]
    assert [d["kind"] for d in docs] == [
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ClusterRole",
        "ClusterRoleBinding",
        "PersistentVolumeClaim",
        "ConfigMap",
        "CronJob",
    ]
    cron = docs[-1]["spec"]
    assert cron["schedule"] == "0 2 * * *" and cron["concurrencyPolicy"] == "Forbid"
    container = cron["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    assert container["env"] == [
        {
            "name": "MONGO_PASSWORD",
            "valueFrom": {
                "secretKeyRef": {"name": "rsdrill-env", "key": "MONGO_PASSWORD", "optional": True}
            },
        }
    ]
    assert docs[-2]["data"] == {path.name: path.read_text()}  # the file as written
    assert server_side_apply(kube.api, docs, namespace, dry_run=True) == []
    # Applied for real, its ServiceAccount passes the preflight of the experiment it runs.
    assert server_side_apply(kube.api, docs, namespace, dry_run=False) == []
    token = (
        client.CoreV1Api(kube.api)
        .create_namespaced_service_account_token(
            "rsdrill-nightly", namespace, {"spec": {"expirationSeconds": 600}}
        )
        .status.token
    )
    config = kube.cluster.kubeconfig(f"nightly-{namespace}", token)
    from tests.kubernetes.support import experiment

    make_target(experiment(config, namespace, faults), tmp_path).preflight()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cron", "every night"], "want five fields"),
        (["--cron", "0 2 * * *", "--name", "Nightly_Run"], "--name 'Nightly_Run'"),
    ],
)
def test_render_refuses_bad_options(tmp_path: Path, args: list[str], message: str) -> None:
    path = _experiment_file(tmp_path, "rsdrill", [{"at": "5s", "kind": "stepdown"}])
    done = _render(*args, str(path))
    assert done.returncode == 2 and message in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_render_refuses_a_kubeconfig_and_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "x.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": "x",
                "faults": [{"at": "5s", "kind": "stepdown"}],
                "target": {
                    "platform": "kubernetes",
                    "uri": "mongodb://m-0.m:27017",
                    "kubernetes": {"kubeconfig": "/home/me/.kube/config"},
                },
            }
        )
    )
    done = _render("--cron", "@daily", str(path))
    assert done.returncode == 2
    assert "x.yaml: target.kubernetes.kubeconfig" in done.stderr
    invalid = tmp_path / "bad.yaml"
    invalid.write_text("name: bad\ntarget: {platform: kubernetes}\nfaults: []\n")
    done = _render("--cron", "@daily", str(invalid))
    assert done.returncode == 2 and "bad.yaml:" in done.stderr and "Traceback" not in done.stderr
