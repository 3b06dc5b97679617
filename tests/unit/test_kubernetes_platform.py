"""`platform: kubernetes` without a cluster: which engine x fault x scope combinations the file
may ask for (each refusal names its field and line), member → pod names, and the resources
`rsdrill plan` shows."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rsdrill.experiment.loader import ExperimentError, load_experiment_text
from rsdrill.experiment.plan import render_plan
from rsdrill.experiment.schema import Experiment
from rsdrill.platforms.kubernetes.options import engine_of
from rsdrill.platforms.kubernetes.resources import (
    PodRef,
    outside_of,
    pod_from_dns,
    resource_name,
)

HEADER = """\
name: k8s
target:
  platform: kubernetes
  uri: mongodb://mongo-0.mongo.db.svc:27017/?replicaSet=rs0
  kubernetes: {namespace: db}
faults:
"""


def load(fault: str, header: str = HEADER) -> Experiment:
    return load_experiment_text(f"{header}  - {fault}\n", "k8s.yaml", {})


@pytest.mark.parametrize(
    "fault",
    [
        "{at: 1s, kind: host-kill, duration: 10s}",
        "{at: 1s, kind: host-kill, engine: litmus, scope: node, duration: 10s}",
        "{at: 1s, kind: host-kill, scope: node, duration: 10s, kubernetes: {delete_node: false}}",
        "{at: 1s, kind: host-freeze, duration: 10s, approximate: true}",
        "{at: 1s, kind: disk-fault, errno: EIO, path: 'journal/*', duration: 10s}",
        "{at: 1s, kind: iops-throttle, write_iops: 100, duration: 10s, approximate: true}",
        "{at: 1s, kind: network-partition, isolate_from: all, duration: 10s}",
        "{at: 1s, kind: stepdown}",
        "{at: 1s, kind: zone-outage, select: {zone: a}, duration: 10s}",
        "{at: 1s, kind: zone-outage, way: kill, select: {zone: a}, duration: 10s}",
    ],
)
def test_supported_faults_validate(fault: str) -> None:
    assert load(fault).faults[0].kind


@pytest.mark.parametrize(
    ("fault", "where", "message"),
    [
        ("{at: 1s, kind: host-freeze, engine: litmus, duration: 5s}", "faults[0].engine",
         "host-freeze with engine litmus: not available (use native or chaos-mesh)"),
        ("{at: 1s, kind: host-kill, engine: gremlin, duration: 5s}", "faults[0].engine",
         "unknown engine 'gremlin'"),
        ("{at: 1s, kind: host-kill, engine: chaos-mesh, scope: node, duration: 5s}",
         "faults[0].scope", "supports scope member"),
        ("{at: 1s, kind: host-kill, scope: host, duration: 5s}", "faults[0].scope",
         "supports scope member and node"),
        ("{at: 1s, kind: iops-throttle, throughput_mb_s: 5, duration: 5s}",
         "faults[0].throughput_mb_s", "no IO bandwidth limit"),
        ("{at: 1s, kind: disk-fault, latency: 5ms, duration: 5s}", "faults[0].latency",
         "one action"),
        ("{at: 1s, kind: network-partition, isolate_from: clients, duration: 5s}",
         "faults[0].isolate_from", "use members or all"),
        ("{at: 1s, kind: host-kill, duration: 5s, restart: {volume: wipe}}",
         "faults[0].restart.volume", "emptyDir"),
        ("{at: 1s, kind: host-kill, restart: false}", "faults[0].restart", "scale it down"),
        ("{at: 1s, kind: host-kill, restart: {model: ha}}", "faults[0].restart.model",
         "the StatefulSet restarts the pod"),
        ("{at: 1s, kind: host-kill, duration: 5s, kubernetes: {litmus_experiment: x}}",
         "faults[0].kubernetes.litmus_experiment", "does not apply"),
        ("{at: 1s, kind: stepdown, engine: native}", "faults[0].engine", "drop `engine`"),
        ("{at: 1s, kind: zone-outage, select: {zone: a}, engine: native, duration: 5s}",
         "faults[0].engine", "zone-outage way isolate on kubernetes is engine chaos-mesh"),
        ("{at: 1s, kind: zone-outage, way: kill, select: {zone: a}, engine: chaos-mesh, "
         "duration: 5s}", "faults[0].engine", "way kill on kubernetes is engine native"),
    ],
)  # fmt: skip
def test_unsupported_faults_are_refused_naming_the_field(
    fault: str, where: str, message: str
) -> None:
    with pytest.raises(ExperimentError) as refused:
        load(fault)
    text = str(refused.value)
    assert text.startswith("k8s.yaml:7:") and where in text and message in text


def test_platform_section_conflicts_are_refused() -> None:
    header = HEADER.replace("{namespace: db}", "{pods: {'m:1': a}, selector: app=mongo}")
    with pytest.raises(ExperimentError, match="give `pods` or `selector`, not both"):
        load("{at: 1s, kind: stepdown}", header)


def test_pod_names_from_statefulset_dns() -> None:
    assert pod_from_dns("mongo-0.mongo.db.svc.cluster.local:27017", "x") == PodRef("db", "mongo-0")
    assert pod_from_dns("mongo-1.mongo:27017", "x") == PodRef("x", "mongo-1")
    assert pod_from_dns("10.0.0.7:27017", "x") is None
    name = resource_name("network-partition", "a-very-long-statefulset-pod-name-" * 3)
    assert len(name) <= 63 and name.startswith("rsdrill-partition-a-very")


def test_plan_shows_every_resource_as_yaml() -> None:
    header = HEADER.replace("{namespace: db}", "{namespace: db, container: mongo}")
    text = (
        f"{header}"
        "  - {at: 1s, kind: host-freeze, engine: chaos-mesh, "
        "select: {member: 'mongo-0.mongo.db.svc:27017'}, duration: 10s, approximate: true}\n"
        "  - {at: 20s, kind: host-kill, engine: litmus, duration: 30s}\n"
        "  - {at: 60s, kind: host-kill, duration: 10s}\n"
        "  - {at: 90s, kind: iops-throttle, iops: 200, duration: 10s, approximate: true}\n"
    )
    plan = render_plan(load_experiment_text(text, "k8s.yaml", {}))
    section = plan.split("kubernetes resources\n", 1)[1]
    documents = [d for d in yaml.safe_load_all(
        "\n".join(line[2:] for line in section.splitlines())) if d]  # fmt: skip
    assert [d["kind"] for d in documents] == ["PodChaos", "ChaosEngine", "IOChaos"]
    freeze, engine, iops = documents
    assert freeze["spec"]["selector"]["pods"] == {"db": ["mongo-0"]}
    assert freeze["spec"]["action"] == "pod-failure" and freeze["spec"]["duration"] == "130s"
    assert engine["spec"]["experiments"][0]["name"] == "pod-delete"
    assert iops["spec"]["delay"] == "5ms" and iops["spec"]["containerNames"] == ["mongo"]
    assert "# delete pod db/<pod of the primary at that moment> (grace period 0s)" in section
    assert "BlockChaos delay instead where the cluster has that CRD" in section


@pytest.mark.parametrize(
    ("fault", "where", "message"),
    [
        ("{at: 1s, kind: iops-throttle, engine: native, iops: 100, duration: 5s}",
         "faults[0].iops", "a cgroup caps reads and writes apart"),
        ("{at: 1s, kind: iops-throttle, engine: native, throughput_mb_s: 5, duration: 5s}",
         "faults[0].throughput_mb_s", "a cgroup caps reads and writes apart"),
        ("{at: 1s, kind: iops-throttle, engine: native, latency: 5ms, duration: 5s}",
         "faults[0].latency", "Chaos Mesh's approximation of a cap: engine: chaos-mesh"),
        ("{at: 1s, kind: iops-throttle, engine: native, write_iops: 5, duration: 5s, "
         "kubernetes: {block_chaos: never}}", "faults[0].kubernetes.block_chaos", "does not apply"),
    ],
)  # fmt: skip
def test_native_iops_throttle_takes_what_a_cgroup_caps(
    fault: str, where: str, message: str
) -> None:
    with pytest.raises(ExperimentError) as refused:
        load(fault)
    assert where in str(refused.value) and message in str(refused.value)
    capped = load("{at: 1s, kind: iops-throttle, engine: native, read_iops: 50, write_mb_s: 2, "
                  "duration: 5s}")  # fmt: skip
    assert capped.faults[0].engine == "native"


def test_plan_shows_the_native_freeze_and_cap() -> None:
    text = (
        f"{HEADER}"
        "  - {at: 1s, kind: host-freeze, select: {member: 'mongo-0.mongo.db.svc:27017'}, "
        "duration: 10s}\n"
        "  - {at: 20s, kind: iops-throttle, engine: native, write_iops: 50, "
        "select: {member: 'mongo-1.mongo.db.svc:27017'}, duration: 10s}\n"
    )
    section = render_plan(load_experiment_text(text, "k8s.yaml", {})).split(
        "kubernetes resources\n", 1
    )[1]
    assert "fault 1: host-freeze on member mongo-0.mongo.db.svc:27017 (engine native)" in section
    assert "exec in pod db/mongo-0 container mongod (pods/exec): kill -STOP" in section
    assert "fault 2: iops-throttle on member mongo-1.mongo.db.svc:27017 (engine native)" in section
    assert "node agent on the node of pod db/mongo-1 caps container mongod's cgroup" in section


def test_a_zone_outage_takes_the_engine_of_its_way() -> None:
    isolate = load("{at: 1s, kind: zone-outage, select: {zone: a}, duration: 5s}")
    kill = load("{at: 1s, kind: zone-outage, way: kill, select: {zone: a}, duration: 5s}")
    assert (engine_of(isolate.faults[0]), engine_of(kill.faults[0])) == ("chaos-mesh", "native")


@pytest.mark.parametrize(
    "kept", [["10.0.0.5"], ["10.0.0.5", "10.0.0.4", "192.168.1.1"], ["fd00::1", "10.0.0.1"]]
)
def test_what_a_zone_drops_is_every_address_but_its_own(kept: list[str]) -> None:
    import ipaddress

    dropped = [ipaddress.ip_network(c) for c in outside_of(kept)]
    # Disjoint, and together the whole of each family less exactly the kept addresses.
    for version, bits in ((4, 32), (6, 128)):
        family = [n for n in dropped if n.version == version]
        if any(ipaddress.ip_address(a).version == version for a in kept):
            held = sum(n.num_addresses for n in family)
            assert held == 2**bits - sum(ipaddress.ip_address(a).version == version for a in kept)
        else:
            assert family == []
    for address in kept:
        assert not any(ipaddress.ip_address(address) in n for n in dropped)
    assert any(ipaddress.ip_address("10.0.0.6") in n for n in dropped)


def test_chaos_mesh_selected_nothing_only_when_its_event_says_so() -> None:
    """Chaos Mesh writes Selected False before selecting as after selecting nothing: only the
    Failed Event of its selection makes it final."""
    from rsdrill.platforms.kubernetes.engines import chaos_mesh_state

    early = {"status": {"conditions": [{"type": "Selected", "status": "False"},
                                       {"type": "AllInjected", "status": "False"}]}}  # fmt: skip
    assert chaos_mesh_state(early) == ("unselected", "")
    other = ["Failed to update conditions: conflict"]
    assert chaos_mesh_state(early, other) == ("unselected", "")
    said = [*other, "Failed to select targets: no target has been selected"]
    assert chaos_mesh_state(early, said) == ("not-selected", "no target has been selected")
    record = {"id": "ns/mongo-0", "phase": "Injected", "events": []}
    injected = {"status": {
        "conditions": [{"type": "Selected", "status": "True"},
                       {"type": "AllInjected", "status": "True"}],
        "experiment": {"containerRecords": [record]},
    }}  # fmt: skip
    assert chaos_mesh_state(injected, said) == ("injected", "")
    assert chaos_mesh_state({}) == ("pending", "")


def test_the_environments_proxy_is_taken_once_at_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HTTPS_PROXY is honoured, and read when the client connects only: a token's hook resets
    the host before every call, which would read the proxy variables (all of os.environ)
    again each time."""
    from rsdrill.platforms.kubernetes.client import ClusterAccess, Kube

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:6443"}}],
        "users": [{"name": "u", "user": {"token": "t0ken"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
    }))  # fmt: skip
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:3128")
    configuration = Kube(ClusterAccess(str(kubeconfig))).api.configuration
    assert configuration.proxy == "http://127.0.0.1:3128"
    monkeypatch.delenv("HTTPS_PROXY")
    auth = configuration.auth_settings()  # the token's hook runs, as before every call
    assert auth["BearerToken"]["value"] == "Bearer t0ken"
    assert configuration.proxy == "http://127.0.0.1:3128"
