"""manifests/: rendering its kustomize overlays (the subset of kustomize they use), and the
generated files under manifests/base/rsdrill, which must match what the code produces.

Regenerate those with `python -m tests.kubernetes.manifests_support`.
"""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from rsdrill.cronjob import LABELS, rbac_objects
from rsdrill.experiment.schema import Experiment
from rsdrill.platforms.kubernetes.options import SUPPORT
from rsdrill.platforms.kubernetes.resources import to_yaml

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"
RBAC = MANIFESTS / "base" / "rsdrill" / "rbac.yaml"
NIGHTLY = MANIFESTS / "base" / "rsdrill" / "nightly.yaml"
NIGHTLY_EXPERIMENTS = [REPO / "experiments" / "k8s-rs3-pod-kill.yaml"]
NIGHTLY_ARGS = ["--cron", "0 2 * * *", "--namespace", "rsdrill", "--name", "rsdrill-nightly"]
_FAULT_FIELDS = {"iops-throttle": {"write_iops": 100}}


def every_fault(namespace: str = "rsdrill") -> Experiment:
    """An experiment with every kind x engine x scope Kubernetes supports: what the rsdrill
    ServiceAccount of manifests/ must be allowed to do, and nothing more."""
    faults = [
        {
            "at": "1s",
            "kind": kind,
            "engine": engine,
            "scope": scope,
            "duration": "10s",
            **_FAULT_FIELDS.get(kind, {}),
        }
        for kind, engines in SUPPORT.items()
        for engine, scopes in engines.items()
        for scope in scopes
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


def rbac_documents() -> list[dict[str, Any]]:
    """manifests/base/rsdrill/rbac.yaml: the ServiceAccount `rsdrill` and its roles."""

    def meta(name: str, namespace: str | None) -> dict[str, Any]:
        out: dict[str, Any] = {"name": name}
        if namespace:
            out["namespace"] = namespace
        out["labels"] = dict(LABELS)
        return out

    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta("rsdrill", "rsdrill")}
    return [account, *rbac_objects("rsdrill", "rsdrill", [every_fault()], meta)]


def nightly_text() -> str:
    """manifests/base/rsdrill/nightly.yaml, as `rsdrill schedule render` writes it."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "rsdrill.cli",
            "schedule",
            "render",
            *NIGHTLY_ARGS,
            *map(str, NIGHTLY_EXPERIMENTS),
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    return done.stdout


def rbac_text() -> str:
    header = (
        "# The ServiceAccount rsdrill runs as for game days (every engine and fault), with only\n"
        "# the permissions its faults use.\n"
        "# Generated: python -m tests.kubernetes.manifests_support\n"
    )
    return header + to_yaml(rbac_documents())


# -- a kustomize subset: resources, namespace, patches (JSON 6902) ----------------------------


def kustomize(directory: Path) -> list[dict[str, Any]]:
    """The objects `kustomize build directory` makes, for the features manifests/ uses."""
    spec = yaml.safe_load((directory / "kustomization.yaml").read_text())
    unknown = set(spec) - {"apiVersion", "kind", "resources", "namespace", "patches"}
    if unknown:
        raise ValueError(f"{directory}: kustomization fields not rendered here: {unknown}")
    objects: list[dict[str, Any]] = []
    for entry in spec.get("resources", []):
        path = (directory / entry).resolve()
        if path.is_dir():
            objects += kustomize(path)
        else:
            objects += [d for d in yaml.safe_load_all(path.read_text()) if d]
    for patch in spec.get("patches", []):
        target = patch["target"]
        matched = [
            o
            for o in objects
            if o["kind"] == target["kind"] and o["metadata"]["name"] == target["name"]
        ]
        if not matched:
            raise ValueError(f"{directory}: patch target {target} matches nothing")
        for obj in matched:
            for op in yaml.safe_load(patch["patch"]):
                _json_patch(obj, op)
    if "namespace" in spec:
        for obj in objects:
            if obj["kind"] not in _CLUSTER_SCOPED:
                obj["metadata"]["namespace"] = spec["namespace"]
            for subject in obj.get("subjects", []):
                if subject.get("kind") == "ServiceAccount":
                    subject["namespace"] = spec["namespace"]
    return copy.deepcopy(objects)


_CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding"}


def _json_patch(obj: dict[str, Any], op: dict[str, Any]) -> None:
    *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"][1:].split("/")]
    node: Any = obj
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    key: Any = int(last) if isinstance(node, list) and last != "-" else last
    if op["op"] == "remove":
        del node[key]
    elif op["op"] == "replace":
        if isinstance(node, dict) and key not in node:
            raise ValueError(f"replace {op['path']}: nothing there")
        node[key] = op["value"]
    elif op["op"] == "add":
        if isinstance(node, list):
            node.insert(len(node) if key == "-" else key, op["value"])
        else:
            node[key] = op["value"]
    else:
        raise ValueError(f"JSON patch op {op['op']} not rendered here")


if __name__ == "__main__":
    RBAC.write_text(rbac_text())
    NIGHTLY.write_text(nightly_text())
    print(f"wrote {RBAC.relative_to(REPO)} and {NIGHTLY.relative_to(REPO)}")
