"""The node agent as a real process over TLS, authenticating callers with TokenReviews against
the real API server under its own ServiceAccount (allowed to create TokenReviews, nothing
else), and capping a real cgroup of this machine (tests/harness/cgroups.py). Only the run's
ServiceAccount gets through; rsdrill's injector and its journaled revert drive it end to end."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from rsdrill.platforms.kubernetes.actions import REVERT_ACTIONS
from rsdrill.platforms.kubernetes.nodeagent import REQUEST_TIMEOUT_S, AgentError, call
from rsdrill.platforms.kubernetes.target import make_target
from tests.harness.cgroups import PodCgroup, pod_cgroup
from tests.harness.injectors import pod_injector
from tests.harness.vcsim import make_certificate
from tests.kubernetes.cluster import KubeCluster, free_port
from tests.kubernetes.conftest import Kube
from tests.kubernetes.support import (
    experiment,
    make_node,
    member,
    node_agent,
    node_agent_process,
    pod_manifest,
    service_account_token,
)

RESTRICTED_TOKEN = "rsdrill-test-restricted-token"  # tests/kubernetes/cluster.py's static user


@dataclass
class Agent:
    url: str
    ca_file: str
    namespace: str
    cgroup: PodCgroup
    tokens: dict[str, str]  # ServiceAccount → a token of it
    kubeconfigs: dict[str, Path]


def _grant(api: Any, namespace: str, account: str) -> None:
    """What the run's ServiceAccount needs from the API server for this fault: get pods."""
    from kubernetes import client

    rbac = client.RbacAuthorizationV1Api(api)
    rbac.create_namespaced_role(namespace, {
        "metadata": {"name": "rsdrill-cap"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}],
    })  # fmt: skip
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": "rsdrill-cap"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "rsdrill-cap"},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
    })  # fmt: skip


@pytest.fixture
def agent(kube: Kube, tmp_path: Path) -> Iterator[Agent]:
    namespace = kube.namespace("agent")
    tokens = {
        name: service_account_token(kube.api, namespace, name) for name in ("rsdrill", "other")
    }
    _grant(kube.api, namespace, "rsdrill")
    kubeconfigs = {n: kube.cluster.kubeconfig(f"{namespace}-{n}", t) for n, t in tokens.items()}
    ca_file = str(kube.cluster.directory / "certs" / "apiserver.crt")
    allow = f"system:serviceaccount:{namespace}:rsdrill"
    with (
        pod_cgroup() as cgroup,
        node_agent(kube, namespace, cgroup.root, tmp_path / "state", allow) as url,
    ):
        yield Agent(url, ca_file, namespace, cgroup, tokens, kubeconfigs)


def _request(agent: Agent) -> dict[str, Any]:
    return {"pod_uid": agent.cgroup.pod_uid, "container_id": agent.cgroup.container_id,
            "volume_path": "/tmp"}  # fmt: skip


def _wiops(agent: Agent) -> str:
    return (agent.cgroup.container / "blkio.throttle.write_iops_device").read_text()


def test_only_the_runs_service_account_may_call_the_agent(agent: Agent) -> None:
    body = {**_request(agent), "limits": {"wiops": 30}}
    refusals = {
        "": (401, "a bearer token is required"),
        "not-a-token": (401, "the token is not valid"),
        RESTRICTED_TOKEN: (403, "restricted may not use the node agent"),
        agent.tokens["other"]: (
            403, f"system:serviceaccount:{agent.namespace}:other may not use the node agent"),
    }  # fmt: skip
    for token, (status, message) in refusals.items():
        with pytest.raises(AgentError) as refused:
            call(agent.url, token, "/v1/cap", body, agent.ca_file)
        assert refused.value.status == status, str(refused.value)
        assert message in str(refused.value)
    assert _wiops(agent) == "", "no refused request changed the cgroup"
    answer = call(agent.url, agent.tokens["rsdrill"], "/v1/cap", body, agent.ca_file)
    assert answer["limits"]["wiops"] == 30
    assert _wiops(agent).split()[1] == "30"
    call(agent.url, agent.tokens["rsdrill"], "/v1/clear", _request(agent), agent.ca_file)
    assert _wiops(agent) == ""


def test_a_caller_silent_before_tls_holds_nobody_else_off(tmp_path: Path) -> None:
    """Any pod that reaches the node's port can connect and say nothing: the agent still
    answers the next caller (the revert that lifts a cap may be the one) at once. No API
    server listens here, so the answer is the TokenReview's 503."""
    certs = tmp_path / "certs"
    certs.mkdir()
    cert, key = make_certificate(certs)
    cert = cert.rename(certs / "apiserver.crt")  # where KubeCluster's kubeconfig names its CA
    cgroup = tmp_path / "cgroup"
    cgroup.mkdir()
    (cgroup / "cgroup.controllers").touch()  # a cgroup v2 hierarchy, as the agent checks one
    nowhere = KubeCluster(tmp_path, f"https://127.0.0.1:{free_port()}", [], tmp_path)
    kubeconfig = nowhere.kubeconfig("node-agent", "a-token")
    with (
        node_agent_process(kubeconfig, (cert, key), cgroup, tmp_path / "state", "a") as url,
        socket.create_connection(("127.0.0.1", urlsplit(url).port or 0)),
    ):
        started = time.monotonic()
        with pytest.raises(AgentError) as refused:
            call(url, "a-token", "/v1/clear", {}, str(cert))
        assert refused.value.status == 503, str(refused.value)
        assert time.monotonic() - started < REQUEST_TIMEOUT_S / 2


def test_the_injector_caps_through_the_agent_and_recover_restores(
    kube: Kube, agent: Agent, tmp_path: Path
) -> None:
    """The run's identity (kubeconfig of the rsdrill ServiceAccount) reads the pod, finds its
    node's agent at the pod's host IP, caps the container, and the journaled action clears it."""
    from kubernetes import client

    node = f"{agent.namespace}-node"
    make_node(kube.api, node)
    core = client.CoreV1Api(kube.api)
    core.create_namespaced_pod(agent.namespace, pod_manifest("mongo-0", node))
    now = "2026-01-01T00:00:00Z"
    core.patch_namespaced_pod_status("mongo-0", agent.namespace, {"status": {
        "phase": "Running", "hostIP": "127.0.0.1", "podIP": "127.0.0.1", "startTime": now,
        "containerStatuses": [{
            "name": "mongod", "ready": True, "restartCount": 0, "image": "mongo:7.0",
            "imageID": "mongo@sha256:0", "containerID": f"containerd://{agent.cgroup.container_id}",
            "state": {"running": {"startedAt": now}},
        }],
    }})  # fmt: skip
    # The pod's uid names its cgroup: the test's tree is renamed after the pod just made.
    uid = core.read_namespaced_pod("mongo-0", agent.namespace).metadata.uid
    pod_dir = agent.cgroup.container.parent
    pod_dir.rename(pod_dir.with_name(f"pod{uid}"))
    agent.cgroup.container = pod_dir.with_name(f"pod{uid}") / agent.cgroup.container_id
    port = int(agent.url.rsplit(":", 1)[1])
    fault = {"at": "1s", "kind": "iops-throttle", "engine": "native", "write_iops": 25,
             "read_mb_s": 2, "duration": "5s"}  # fmt: skip
    access = {"port": port, "ca_file": agent.ca_file}
    exp = experiment(agent.kubeconfigs["rsdrill"], agent.namespace, [fault], volume_path="/tmp",
                     node_agent=access)  # fmt: skip
    target = make_target(exp, tmp_path)
    injector = pod_injector(target, target.faults[0], member(agent.namespace, 0))
    action = injector.revert_action()
    assert action["action"] == "kubernetes.node-agent-clear" and "token" not in str(action)
    injector.inject()
    assert injector.verify(1.0)
    assert _wiops(agent).split()[1] == "25"
    read_bps = (agent.cgroup.container / "blkio.throttle.read_bps_device").read_text()
    assert read_bps.split()[1] == str(2 * 1024 * 1024)
    # The run dies here; `rsdrill recover` carries out the journaled action.
    said = REVERT_ACTIONS["kubernetes.node-agent-clear"](action)
    assert said.startswith(f"pod {agent.namespace}/mongo-0: I/O limits on ")
    assert _wiops(agent) == ""
    assert not injector.verify(1.0)
    injector.revert()  # and the run's own revert after it changes nothing
    assert _wiops(agent) == ""
    target.teardown()
