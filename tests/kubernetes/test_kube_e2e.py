"""One whole `rsdrill run` of experiments/k8s-rs3-pod-kill.yaml on Kubernetes, measured end to
end: the pods on the real API server are bound to sandbox members (a pod's deletion kills its
member; the StatefulSet stand-in re-creates the pod and the member restarts), and the Chaos Mesh
stand-in carries out the PodChaos rsdrill creates. Only the target section is swapped for the
harness's (connection string, kubeconfig, pod map); faults, probes and SLOs are the file's."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from rsdrill.sandbox.cluster import EmulatorEngine, up
from rsdrill.sandbox.config import Settings, build_topology
from tests.kubernetes.cluster import REPO, env_without_kube
from tests.kubernetes.conftest import Kube
from tests.kubernetes.controllers import ChaosMeshController, Kubelet
from tests.kubernetes.support import make_node, make_pod, rsdrill_objects

EXPERIMENT = REPO / "experiments" / "k8s-rs3-pod-kill.yaml"


@pytest.mark.slow
def test_pod_kill_run_measures_a_failover(
    kube: Kube, tmp_path: Path, free_port_base: Callable[[int], int]
) -> None:
    spec = build_topology(
        "rs3", port_base=free_port_base(3), settings=Settings(election_timeout_ms=2000)
    )
    sandbox = up(tmp_path / "set", spec, EmulatorEngine())
    namespace = kube.namespace("e2e")
    node = f"{namespace}-node"
    make_node(kube.api, node)
    pods = {m.host: f"mongo-{m.id}" for m in spec.members}
    by_pod = {pod: spec.member(host) for host, pod in pods.items()}
    kubelet = Kubelet(
        kube.api,
        namespace,
        recreate_after_s=3.0,
        on_gone=lambda pod: sandbox.kill(by_pod[pod]),
        on_back=lambda pod: sandbox.start(by_pod[pod]),
    )
    for pod in pods.values():
        kubelet.adopt(*make_pod(kube.api, namespace, pod, node))
    mesh = ChaosMeshController(kube.api, namespace)
    loops = [kubelet.start(), mesh.start()]
    try:
        document = yaml.safe_load(EXPERIMENT.read_text())
        document["target"]["uri"] = sandbox.uri
        document["target"]["kubernetes"] = {
            "kubeconfig": str(kube.admin),
            "namespace": namespace,
            "pods": pods,
        }
        path = tmp_path / EXPERIMENT.name
        path.write_text(yaml.safe_dump(document))
        out = tmp_path / "out"
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "rsdrill.cli.app",
                "run",
                str(path),
                "--out",
                str(out),
                "--no-live",
                "--no-history",
                "--yes",
            ],
            capture_output=True,
            text=True,
            timeout=240,
            env=env_without_kube(),
            cwd=REPO,
        )
    finally:
        for loop in loops:
            loop.stop()
        sandbox.down(grace_s=2.0)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads((out / "result.json").read_text())
    assert result["verdict"] == "pass"
    [fault] = result["faults"]
    assert fault["kind"] == "host-kill" and fault["verified_at_s"] is not None
    assert "PodChaos" in fault["detail"]["plan"]
    failover = result["metrics"]["failover_s"]
    assert failover is not None and 0 < failover <= 12.7
    assert result["metrics"]["lost_acknowledged_writes"] == 0
    killed = [o for o in mesh.seen if o["kind"] == "PodChaos"]
    assert [o["spec"]["selector"]["pods"][namespace] for o in killed] == [[pods[fault["target"]]]]
    assert rsdrill_objects(kube.api, namespace) == []
    assert not kubelet.errors and not mesh.errors
