"""The node agent as a real process over TLS, authenticating callers with TokenReviews against
the real API server under its own ServiceAccount (allowed to create TokenReviews, nothing
else), and capping a real cgroup of this machine (tests/harness/cgroups.py). Only the run's
ServiceAccount gets through, with a token bound to the agent's audience: its token for the API
server, which an agent could replay there, is refused; rsdrill's injector and its journaled
revert drive it end to end."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from rsdrill.platforms.base import TargetError
from rsdrill.platforms.kubernetes.actions import REVERT_ACTIONS
from rsdrill.platforms.kubernetes.client import ClusterAccess, KubeError
from rsdrill.platforms.kubernetes.client import Kube as KubeClient
from rsdrill.platforms.kubernetes.nodeagent import (
    AUDIENCE,
    REQUEST_TIMEOUT_S,
    AgentError,
    agent_token,
    call,
)
from rsdrill.platforms.kubernetes.target import make_target
from tests.harness.cgroups import PodCgroup, pod_cgroup
from tests.harness.injectors import pod_injector
from tests.harness.vcsim import make_certificate
from tests.kubernetes.cluster import KubeCluster, free_port
from tests.kubernetes.conftest import Kube
from tests.kubernetes.support import (
    agent_log,
    experiment,
    make_node,
    member,
    node_agent,
    node_agent_process,
    pod_manifest,
    service_account_token,
    token_of,
)

RESTRICTED_TOKEN = "rsdrill-test-restricted-token"  # tests/kubernetes/cluster.py's static user


@dataclass
class Agent:
    url: str
    ca_file: str
    namespace: str
    cgroup: PodCgroup
    tokens: dict[str, str]  # ServiceAccount → a token of it, for the API server
    agent_tokens: dict[str, str]  # ServiceAccount → a token of it, for the agent's audience
    kubeconfigs: dict[str, Path]
    log: Path  # the agent's


def _grant(api: Any, namespace: str, account: str) -> None:
    """What the run's ServiceAccount needs from the API server for this fault: get pods, and
    a token of its own for the agent (manifests/base/rsdrill/rbac.yaml's rules)."""
    from kubernetes import client

    rbac = client.RbacAuthorizationV1Api(api)
    rbac.create_namespaced_role(namespace, {
        "metadata": {"name": "rsdrill-cap"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
                  {"apiGroups": [""], "resources": ["serviceaccounts/token"],
                   "verbs": ["create"], "resourceNames": [account]}],
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
    agent_tokens = {name: token_of(kube.api, namespace, name, AUDIENCE) for name in tokens}
    _grant(kube.api, namespace, "rsdrill")
    kubeconfigs = {n: kube.cluster.kubeconfig(f"{namespace}-{n}", t) for n, t in tokens.items()}
    ca_file = str(kube.cluster.directory / "certs" / "apiserver.crt")
    allow = f"system:serviceaccount:{namespace}:rsdrill"
    state = tmp_path / "state"
    with (
        pod_cgroup() as cgroup,
        node_agent(kube, namespace, cgroup.root, state, allow) as url,
    ):
        yield Agent(url, ca_file, namespace, cgroup, tokens, agent_tokens, kubeconfigs,
                    agent_log(state))  # fmt: skip


def _request(agent: Agent) -> dict[str, Any]:
    return {"pod_uid": agent.cgroup.pod_uid, "container_id": agent.cgroup.container_id,
            "volume_path": "/tmp"}  # fmt: skip


def _wiops(agent: Agent) -> str:
    return (agent.cgroup.container / "blkio.throttle.write_iops_device").read_text()


def test_only_the_runs_service_account_may_call_the_agent(agent: Agent) -> None:
    body = {**_request(agent), "limits": {"wiops": 30}}
    not_valid = (401, f"the token is not valid for the audience {AUDIENCE}")
    refusals = {
        "": (401, "a bearer token is required"),
        "not-a-token": not_valid,
        RESTRICTED_TOKEN: not_valid,  # a user's static token is the API server's only
        # The run's own token for the API server, which an agent given it could replay there.
        agent.tokens["rsdrill"]: not_valid,
        agent.tokens["other"]: not_valid,
        # Bound to the agent, of an identity not allowed: refused without being named.
        agent.agent_tokens["other"]: (403, "this identity may not use the node agent"),
    }
    for token, (status, message) in refusals.items():
        with pytest.raises(AgentError) as refused:
            call(agent.url, token, "/v1/cap", body, agent.ca_file)
        assert refused.value.status == status, str(refused.value)
        assert message in str(refused.value)
        assert "serviceaccount" not in str(refused.value) and "restricted" not in str(refused.value)
    assert _wiops(agent) == "", "no refused request changed the cgroup"
    token = agent.agent_tokens["rsdrill"]
    answer = call(agent.url, token, "/v1/cap", body, agent.ca_file)
    assert answer["limits"]["wiops"] == 30
    assert _wiops(agent).split()[1] == "30"
    call(agent.url, token, "/v1/clear", _request(agent), agent.ca_file)
    assert _wiops(agent) == ""
    # The operator learns who was refused; no token reaches the log.
    log = agent.log.read_text()
    assert f"refused system:serviceaccount:{agent.namespace}:other from 127.0.0.1" in log
    assert not any(t and t in log for t in [*agent.tokens.values(), *agent.agent_tokens.values()])


def test_the_run_sends_a_short_token_for_the_agent_only(kube: Kube, agent: Agent) -> None:
    """The token rsdrill sends is its ServiceAccount's, requested once for the run, bound to
    the agent's audience and short-lived: the API server refuses it, so an agent (or whoever
    reads its traffic) cannot replay it there."""
    import base64
    import json

    run = KubeClient(ClusterAccess(str(agent.kubeconfigs["rsdrill"])))
    try:
        token = agent_token(run)
        assert agent_token(run) == token, "requested once, kept for its life"
        claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
        assert claims["aud"] == [AUDIENCE]
        assert claims["sub"] == f"system:serviceaccount:{agent.namespace}:rsdrill"
        assert claims["exp"] - claims["iat"] <= 600
        limits = call(agent.url, token, "/v1/limits", _request(agent), agent.ca_file)["limits"]
        assert not any(limits.values()), "accepted: no cap yet"
    finally:
        run.close()
    replayed = KubeClient(ClusterAccess(str(kube.cluster.kubeconfig("replayed", token))))
    try:
        with pytest.raises(KubeError) as refused:
            replayed.pod(agent.namespace, "any")
        assert refused.value.status == 401
    finally:
        replayed.close()


def test_a_user_is_refused_a_token_for_the_agent(kube: Kube, agent: Agent, tmp_path: Path) -> None:
    """A user's kubeconfig (no ServiceAccount) cannot have an audience-bound token, and its own
    token is not sent instead: the preflight refuses the run before anything is injected."""
    fault = {"at": "1s", "kind": "iops-throttle", "engine": "native", "write_iops": 25,
             "duration": "5s"}  # fmt: skip
    user = KubeClient(ClusterAccess(str(kube.restricted)))
    try:
        with pytest.raises(KubeError, match="this identity is restricted, no ServiceAccount"):
            agent_token(user)
    finally:
        user.close()
    target = make_target(experiment(kube.restricted, agent.namespace, [fault]), tmp_path)
    with pytest.raises(TargetError) as refused:
        target.preflight()
    assert "rsdrill runs as restricted, no ServiceAccount" in str(refused.value)
    # A ServiceAccount without the grant is told which: its own token, and only its own.
    target = make_target(experiment(agent.kubeconfigs["other"], agent.namespace, [fault]), tmp_path)
    with pytest.raises(TargetError) as refused:
        target.preflight()
    assert (f"create serviceaccounts/token of other in namespace {agent.namespace}"
            in str(refused.value))  # fmt: skip
    make_target(experiment(agent.kubeconfigs["rsdrill"], agent.namespace, [fault]),
                tmp_path).preflight()  # fmt: skip


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
