"""manifests/: rendering its kustomize directories with kustomize itself (built by
.ci/install-kustomize), and the generated files in it, which must match what the code produces:
the ServiceAccount rsdrill's Role for pod-level faults (base/rsdrill), the opt-in ClusterRole for
node-level faults (node-faults/), and one nightly CronJob per topology (nightly/rs1, nightly/rs3),
each running an experiment of its own topology.

Regenerate those with `python -m tests.kubernetes.manifests_support`.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from rsdrill.cronjob import LABELS, rbac_objects
from rsdrill.experiment.schema import Experiment
from rsdrill.platforms.kubernetes.options import SUPPORT
from rsdrill.platforms.kubernetes.resources import to_yaml
from tests.harness.cli import rsdrill_run
from tests.harness.processes import installed

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"
RBAC = MANIFESTS / "base" / "rsdrill" / "rbac.yaml"
NODE_RBAC = MANIFESTS / "node-faults" / "rbac.yaml"
INSTALL_KUSTOMIZE = REPO / ".ci" / "install-kustomize"
# Each topology's nightly CronJob and the experiments it runs.
NIGHTLY = {
    "rs1": [REPO / "experiments" / "k8s-rs1-pod-kill.yaml"],
    "rs3": [REPO / "experiments" / "k8s-rs3-pod-kill.yaml"],
}
# The Pushgateway's URL comes from the Secret rsdrill-env, when it has one (scheduling.md).
NIGHTLY_ARGS = ["--cron", "0 2 * * *", "--namespace", "rsdrill", "--name", "rsdrill-nightly",
                "--metrics-push", "${RSDRILL_METRICS_PUSH}"]  # fmt: skip
_FAULT_FIELDS: dict[str, dict[str, Any]] = {
    "iops-throttle": {"write_iops": 100},
    "network-degrade": {"latency": "50ms", "between": "members", "direction": "outbound"},
    "zone-outage": {"select": {"zone": "a"}},
}
# Kinds whose every way reaches the cluster's nodes (a zone's), whatever their scope: their
# grants are the opt-in's of manifests/node-faults.
_NODE_LEVEL_KINDS = ("zone-outage",)
# A kind whose engine follows one of its fields.
_ENGINE_FIELDS: dict[tuple[str, str], dict[str, Any]] = {("zone-outage", "native"): {"way": "kill"}}


def every_fault(
    namespace: str = "rsdrill", scopes: tuple[str, ...] = ("member", "node")
) -> Experiment:
    """An experiment with every kind x engine x scope (of `scopes`; a zone's outage is node
    level) Kubernetes supports: what the rsdrill ServiceAccount of manifests/ must be allowed to
    do, and nothing more."""
    faults = [
        {
            "at": "1s",
            "kind": kind,
            "engine": engine,
            "scope": scope,
            "duration": "10s",
            **_FAULT_FIELDS.get(kind, {}),
            **_ENGINE_FIELDS.get((kind, engine), {}),
            # Every way is wanted here, the approximate and one-way ones too.
            "approximate": True,
            "one_way": True,
        }
        for kind, engines in SUPPORT.items()
        for engine, engine_scopes in engines.items()
        for scope in engine_scopes
        if ("node" if kind in _NODE_LEVEL_KINDS else scope) in scopes
    ]
    return Experiment.model_validate(
        {
            "name": "every-fault",
            "target": {
                "platform": "kubernetes",
                "uri": "mongodb://mongo-0.mongo:27017",
                "kubernetes": {"namespace": namespace, "selector": "app=mongo"},
            },
            "faults": faults,
        }
    )


def _meta(name: str, namespace: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name}
    if namespace:
        out["namespace"] = namespace
    out["labels"] = dict(LABELS)
    return out


def rbac_documents() -> list[dict[str, Any]]:
    """manifests/base/rsdrill/rbac.yaml: the ServiceAccount `rsdrill` and its namespaced Role
    for every pod-level fault."""
    account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _meta("rsdrill", "rsdrill"),
    }
    objects = rbac_objects("rsdrill", "rsdrill", [every_fault(scopes=("member",))], _meta)
    assert not any(o["kind"].startswith("Cluster") for o in objects)
    return [account, *objects]


def node_rbac_documents() -> list[dict[str, Any]]:
    """manifests/node-faults/rbac.yaml: the cluster-wide part of every node-level fault."""
    objects = rbac_objects("rsdrill", "rsdrill", [every_fault(scopes=("node",))], _meta)
    return [o for o in objects if o["kind"].startswith("Cluster")]


def nightly_text(topology: str) -> str:
    """manifests/nightly/<topology>/nightly.yaml, as `rsdrill schedule render` writes it."""
    done = rsdrill_run(
        ["schedule", "render", *NIGHTLY_ARGS,
         *map(str, NIGHTLY[topology])],
        capture_output=True, text=True, check=True, cwd=REPO,
    )  # fmt: skip
    return done.stdout


def rbac_text() -> str:
    header = (
        "# The ServiceAccount rsdrill runs as for game days (every engine and pod-level fault),\n"
        "# with only the permissions those faults use. Node-level faults: manifests/node-faults.\n"
        "# Generated: python -m tests.kubernetes.manifests_support\n"
    )
    return header + to_yaml(rbac_documents())


def node_rbac_text() -> str:
    header = (
        "# Opt-in: what rsdrill's node-level faults (scope: node) need cluster-wide, bound to the\n"
        "# ServiceAccount rsdrill of manifests/base/rsdrill.\n"
        "# Generated: python -m tests.kubernetes.manifests_support\n"
    )
    return header + to_yaml(node_rbac_documents())


def generated_files() -> dict[Path, str]:
    """Every generated file under manifests/ and its text as the code makes it now."""
    files = {RBAC: rbac_text(), NODE_RBAC: node_rbac_text()}
    for topology in NIGHTLY:
        files[MANIFESTS / "nightly" / topology / "nightly.yaml"] = nightly_text(topology)
    return files


def kustomize(directory: Path) -> list[dict[str, Any]]:
    """The objects `kustomize build directory` makes (kustomize built once by its script)."""
    binary = installed(INSTALL_KUSTOMIZE).strip().splitlines()[-1]
    done = subprocess.run([binary, "build", str(directory)], capture_output=True, text=True,
                          check=False)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"kustomize build {directory}: {done.stderr}")
    return [d for d in yaml.safe_load_all(done.stdout) if d]


if __name__ == "__main__":
    for path, text in generated_files().items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path.relative_to(REPO)}")
