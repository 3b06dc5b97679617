"""A replica set whose members' pods are a real StatefulSet's on the test cluster (see
tests/kubernetes/kubelet.py for what binds a pod to its member), and `rsdrill` run against it as
a nightly job runs it."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rsdrill.platforms.sandbox.volumes import MemberVolumes
from rsdrill.sandbox.cluster import EmulatorEngine, up
from rsdrill.sandbox.config import Settings, build_topology
from tests.harness.cli import Rsdrill
from tests.kubernetes.cluster import REPO, env_without_kube
from tests.kubernetes.controllers import ChaosObjects, Loop, told
from tests.kubernetes.kubelet import Kubelet
from tests.kubernetes.support import (
    delete_nodes,
    make_node,
    make_statefulset,
    rsdrill_objects,
    wait_running,
)

EXPERIMENT = REPO / "experiments" / "k8s-rs3-pod-kill.yaml"


@dataclass
class BoundSet:
    """A replica set of emulator members whose pods live on the real API server."""

    sandbox: Any
    namespace: str
    pods: dict[str, str]  # member host:port → pod
    kubelet: Kubelet
    mesh: ChaosObjects  # the Chaos Mesh objects made (the real controller acts on them)

    def experiment(self, kube: Any, tmp: Path, source: Path = EXPERIMENT, **changes: Any) -> Path:
        """The experiment file `source` aimed at this set (and `changes` on top)."""
        return aimed(kube, tmp, source, self.sandbox.uri, self.namespace, self.pods, **changes)


def aimed(
    kube: Any,
    tmp: Path,
    source: Path,
    uri: str,
    namespace: str,
    pods: dict[str, str],
    kubernetes: dict[str, Any] | None = None,
    **changes: Any,
) -> Path:
    """The experiment file `source` aimed at the set at `uri` whose members are `pods` in
    `namespace`, as the admin (with `kubernetes` target options and `changes` on top), written
    under `tmp`."""
    document = yaml.safe_load(source.read_text())
    document["target"]["uri"] = uri
    document["target"]["kubernetes"] = {
        "kubeconfig": str(kube.admin), "namespace": namespace, "pods": pods, **(kubernetes or {}),
    }  # fmt: skip
    document.update(changes)
    path = tmp / source.name
    path.write_text(yaml.safe_dump(document))
    return path


def file_run(
    kube: Any, bound_set: BoundSet, tmp_path: Path, source: Path, **fault: Any
) -> dict[str, Any]:
    """`rsdrill run` of the experiment file `source` on the bound set, its one fault changed by
    `fault` and its observation after the revert 3 s: result.json, once it passed."""
    [written] = yaml.safe_load(source.read_text())["faults"]
    path = bound_set.experiment(
        kube, tmp_path, source, faults=[{**written, **fault}], observe={"after_revert": "3s"}
    )
    run = run_file(path, tmp_path / "out", tmp_path / "home")
    output, _ = run.communicate(timeout=240)
    assert run.returncode == 0, output
    result: dict[str, Any] = json.loads((tmp_path / "out" / "result.json").read_text())
    assert result["verdict"] == "pass" and result["metrics"]["lost_acknowledged_writes"] == 0
    assert rsdrill_objects(kube.api, bound_set.namespace) == []
    return result


def rsdrill_cli(*args: str, home: Path) -> subprocess.Popen[str]:
    """`rsdrill ARGS` in its own process, its journal under `home`, no KUBECONFIG of ours."""
    env = {**env_without_kube(), "RSDRILL_HOME": str(home)}
    return Rsdrill(
        [*args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=REPO,
    )


def run_file(path: Path, out: Path, home: Path) -> subprocess.Popen[str]:
    """`rsdrill run` as a nightly job would start it: no live view, no history, no prompt."""
    return rsdrill_cli(
        "run", str(path), "--out", str(out), "--no-live", "--no-history", "--yes", home=home
    )


@contextmanager
def bound(
    kube: Any,
    directory: Path,
    port_base: int,
    *,
    zones: list[str] | None = None,
    topology: str = "rs3",
    volumes: bool = False,
) -> Iterator[BoundSet]:
    """The set as a real StatefulSet's pods, each on its own node with its local volume (in
    `zones`, each member's node labelled with its zone). With `volumes`, each volume is a
    faultfs mount that the stand-in chaos-daemon acts on for the pod's container."""
    spec = build_topology(
        topology, port_base=port_base, settings=Settings(election_timeout_ms=2000)
    )
    on_faultfs = MemberVolumes(directory / "set", spec, track_unsynced=False) if volumes else None
    daemon = kube.daemon
    if on_faultfs is not None and daemon is None:
        raise RuntimeError("volumes on faultfs are for the stand-in chaos-daemon, not here")
    loops: list[Loop] = []
    with ExitStack() as teardown:  # whatever fails, the members go down, then their volumes
        if on_faultfs is not None:
            teardown.callback(on_faultfs.unmount_all)
        sandbox = up(directory / "set", spec, EmulatorEngine(),
                     on_faultfs.mount_all if on_faultfs else None)  # fmt: skip
        teardown.callback(sandbox.down, grace_s=2.0)
        namespace = kube.namespace("e2e")
        nodes = [f"{namespace}-node-{i}" for i in range(len(spec.members))]
        for node, zone in zip(nodes, zones or [None] * len(nodes), strict=True):
            make_node(kube.api, node, zone)
        # Gone with the set: the harness renews every node's lease, however many tests ago.
        teardown.callback(delete_nodes, kube.api, nodes)
        teardown.callback(lambda: [loop.stop() for loop in loops])  # first of all
        pods = {m.host: f"mongo-{m.id}" for m in spec.members}
        by_pod = {pod: spec.member(host) for host, pod in pods.items()}
        # Each pod and node its own address, as a kubelet reports them (Chaos Mesh's partition
        # drops what goes to the pods' addresses; a zone's isolation keeps its own).
        addresses = {pod: {"pod_ip": f"10.1.0.{i + 1}", "host_ip": f"10.2.0.{i + 1}"}
                     for i, pod in enumerate(by_pod)}  # fmt: skip

        def start(pod: str) -> None:
            if sandbox.pid(by_pod[pod]) is None:  # the members run before their pods are made
                sandbox.start(by_pod[pod])

        def stop(pod: str) -> None:
            if sandbox.pid(by_pod[pod]) is not None:  # gone already with its lost node
                sandbox.kill(by_pod[pod])

        def running(pod: str, container_id: str) -> None:
            if on_faultfs is not None and daemon is not None:
                daemon.attach(container_id, on_faultfs.data_dir(by_pod[pod]))

        kubelet = Kubelet(
            kube.api, namespace, on_start=start, on_stop=stop,
            addresses=addresses, on_running=running, lost=kube.heartbeat.is_lost,
        )  # fmt: skip
        mesh = ChaosObjects(kube.api, namespace)
        loops += [kubelet.start(), mesh.start()]
        assert make_statefulset(kube.api, namespace, nodes) == list(by_pod)
        wait_running(kube.api, namespace, list(by_pod))
        yield BoundSet(sandbox, namespace, pods, kubelet, mesh)
    errors = [error for loop in loops for error in loop.errors]
    assert not errors, told(errors)
