"""manifests/ and `rsdrill schedule render` against the real API server: every kustomize
directory, rendered by kustomize itself, passes a server-side dry run (with strict field
validation); each overlay's RBAC is exactly what the experiments it ships use (nothing missing,
nothing extra) and its nightly CronJob runs experiments of its own topology; the rendered RBAC
is enough for the scheduled experiments' preflight; and no secret is written out."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from rsdrill.cli.app import app
from rsdrill.cronjob import role_rules
from rsdrill.experiment.loader import load_experiment_text
from rsdrill.experiment.schema import Experiment
from rsdrill.platforms.kubernetes.options import KubernetesFault
from rsdrill.platforms.kubernetes.target import make_target
from tests.kubernetes.cluster import server_side_apply
from tests.kubernetes.conftest import Kube
from tests.kubernetes.manifests_support import MANIFESTS, every_fault, generated_files, kustomize

OVERLAYS = sorted(p.name for p in (MANIFESTS / "overlays").iterdir())
OPT_INS = ["node-faults", "litmus", "node-agent"]

Grant = tuple[str | None, str, str, str]  # (namespace or None: cluster-wide, group, resource, verb)


def test_generated_manifests_match_the_code() -> None:
    for path, text in generated_files().items():
        assert path.read_text() == text, (
            f"{path}: regenerate: python -m tests.kubernetes.manifests_support"
        )


def _grants_of(docs: list[dict[str, Any]], account: str) -> set[Grant]:
    """Every (namespace, group, resource, verb) the bindings in `docs` give ServiceAccount
    `account`, through the Roles and ClusterRoles in `docs`."""
    roles = {
        (d["kind"], d["metadata"]["name"]): d for d in docs if d["kind"] in ("Role", "ClusterRole")
    }
    grants: set[Grant] = set()
    for binding in (d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        if not any(s.get("kind") == "ServiceAccount" and s["name"] == account
                   for s in binding["subjects"]):  # fmt: skip
            continue
        role = roles[(binding["roleRef"]["kind"], binding["roleRef"]["name"])]
        where = binding["metadata"].get("namespace") if binding["kind"] == "RoleBinding" else None
        grants |= _flat(where, role["rules"])
    return grants


def _flat(where: str | None, rules: list[dict[str, Any]]) -> set[Grant]:
    return {
        (where, group, resource, verb)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def _needed(experiments: list[Experiment], account: str) -> set[Grant]:
    """What the experiments need, run as the ServiceAccount `account` of namespace rsdrill."""
    namespaced, cluster = role_rules(experiments, ("rsdrill", account))
    needed = _flat(None, cluster)
    for where, rules in namespaced.items():
        needed |= _flat(where, rules)
    return needed


def _scheduled(docs: list[dict[str, Any]]) -> list[Experiment]:
    """The experiments the overlay's CronJob runs (its ConfigMap's files)."""
    [config] = [d for d in docs if d["kind"] == "ConfigMap"]
    return [load_experiment_text(text, name, {}) for name, text in config["data"].items()]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_rbac_is_what_its_experiments_use(overlay: str) -> None:
    docs = kustomize(MANIFESTS / "overlays" / overlay)
    topology = overlay.split("-")[0]
    statefulset = next(d for d in docs if d["kind"] == "StatefulSet")
    scheduled = _scheduled(docs)
    assert scheduled, "the overlay's CronJob runs something"
    for exp in scheduled:
        assert exp.target.topology == topology, f"{overlay} runs {exp.name} ({exp.target.topology})"
        hosts = exp.target.uri.split("//", 1)[1].split("/", 1)[0].split(",")
        assert len(hosts) == statefulset["spec"]["replicas"], exp.name
    accounts = {d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"}
    assert accounts == {"rsdrill", "rsdrill-nightly"}
    assert _grants_of(docs, "rsdrill-nightly") == _needed(scheduled, "rsdrill-nightly")
    # The game-day account: every pod-level fault, in the namespace only.
    assert _grants_of(docs, "rsdrill") == _needed([every_fault(scopes=("member",))], "rsdrill")
    # Tokens (the node agent's) of its own only: another account's would carry its rights.
    [token_rule] = [r for d in docs if d["kind"] == "Role"
                    for r in d["rules"] if "serviceaccounts/token" in r["resources"]]  # fmt: skip
    assert token_rule["resourceNames"] == ["rsdrill"]
    assert not any(d["kind"].startswith("Cluster") for d in docs), "no cluster-wide grant"


def test_node_faults_overlay_grants_the_node_level_faults_only() -> None:
    docs = kustomize(MANIFESTS / "node-faults")
    node_level = {g for g in _needed([every_fault(scopes=("node",))], "rsdrill") if g[0] is None}
    assert node_level and _grants_of(docs, "rsdrill") == node_level


def test_litmus_runs_as_its_own_namespaced_account() -> None:
    docs = kustomize(MANIFESTS / "litmus")
    account = KubernetesFault().chaos_service_account
    assert account != "litmus-admin"
    assert {d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"} == {account}
    grants = _grants_of(docs, account)
    assert grants and all(where == "rsdrill" for where, *_ in grants)
    assert not any("*" in g or resource == "secrets" for g in grants for resource in [g[2]])
    assert not any(d["kind"].startswith("Cluster") for d in docs)


@pytest.mark.parametrize("directory", [f"overlays/{o}" for o in OVERLAYS] + OPT_INS)
def test_manifests_pass_a_server_side_dry_run(kube: Kube, directory: str) -> None:
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    docs = kustomize(MANIFESTS / directory)
    core = client.CoreV1Api(kube.api)
    try:  # its objects go to namespace rsdrill, which a dry run of the Namespace cannot make
        core.create_namespace({"metadata": {"name": "rsdrill"}})
    except ApiException as exc:
        assert exc.status == 409
    errors = server_side_apply(
        kube.api, [d for d in docs if d["kind"] != "Namespace"], "rsdrill", dry_run=True
    )
    assert errors == []
    if not directory.startswith("overlays/"):
        return
    kinds = {d["kind"] for d in docs}
    assert {"StatefulSet", "Service", "Job", "PodDisruptionBudget", "CronJob", "ConfigMap",
            "PersistentVolumeClaim", "ServiceAccount", "Role"} <= kinds  # fmt: skip
    overlay = directory.split("/", 1)[1]
    statefulset = next(d for d in docs if d["kind"] == "StatefulSet")
    replicas = 1 if overlay.startswith("rs1") else 3
    assert statefulset["spec"]["replicas"] == replicas
    assert ("volumeClaimTemplates" in statefulset["spec"]) == overlay.endswith("-pvc")
    assert statefulset["spec"]["template"]["spec"]["shareProcessNamespace"] is True
    job = next(d for d in docs if d["kind"] == "Job")
    members = job["spec"]["template"]["spec"]["containers"][0]["env"][1]["value"]
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
    config = kube.account_kubeconfig(namespace, "rsdrill-nightly")
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
