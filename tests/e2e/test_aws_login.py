"""MONGODB-AWS end to end, judged by parts nobody here wrote: moto's STS checks the SigV4
signatures (its IAM request authentication on), pymongo with pymongo-auth-aws logs in to the
sandbox as drivers do, and rsdrill's own member connections log in the same way, with the
credentials in the URI, a session token, or the environment. Nothing leaves 127.0.0.1."""

from __future__ import annotations

import base64
import json
import os
import secrets
import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from pymongo import MongoClient
from pymongo.errors import OperationFailure

from rsdrill.connection import ConnectOptions, DirectConnection, LoginError
from rsdrill.platforms.machine.local_hosts import listening_pid
from rsdrill.sandbox.cluster import EmulatorEngine, Sandbox, up
from rsdrill.sandbox.config import build_topology
from tests.e2e.catalog import catalog
from tests.e2e.local_set import local_target
from tests.harness.cli import rsdrill_run
from tests.harness.moto_ec2 import client, moto_server, set_auth

ACCOUNT = "123456789012"
ROLE_SESSIONS = f"arn:aws:sts::{ACCOUNT}:assumed-role/drill-role/*"
# The IAM calls that set the account up; every call after them is signature-checked.
SETUP_CALLS = 4


@dataclass(frozen=True)
class Keys:
    key_id: str
    secret: str = ""
    token: str | None = None


@dataclass(frozen=True)
class Sts:
    endpoint: str
    user_arn: str
    user: Keys
    role: Keys  # temporary credentials of an assumed role (with a session token)


@pytest.fixture(scope="module")
def sts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sts]:
    """moto's server with an IAM user, its access key, and a role it assumed."""
    with moto_server(tmp_path_factory.mktemp("moto") / "moto_server.log") as endpoint:
        set_auth(endpoint, SETUP_CALLS)
        iam = client(endpoint, "iam", aws_access_key_id="setup", aws_secret_access_key="setup")
        user = iam.create_user(UserName="drill")["User"]
        key = iam.create_access_key(UserName="drill")["AccessKey"]
        trust = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow",
                 "Principal": {"AWS": user["Arn"]}, "Action": "sts:AssumeRole"}]}  # fmt: skip
        role = iam.create_role(RoleName="drill-role", AssumeRolePolicyDocument=json.dumps(trust))
        may_assume = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow",
                      "Action": "sts:AssumeRole", "Resource": role["Role"]["Arn"]}]}  # fmt: skip
        iam.put_user_policy(UserName="drill", PolicyName="assume",
                            PolicyDocument=json.dumps(may_assume))  # fmt: skip
        user_keys = Keys(key["AccessKeyId"], key["SecretAccessKey"])
        sts_client = client(endpoint, "sts", aws_access_key_id=user_keys.key_id,
                            aws_secret_access_key=user_keys.secret)  # fmt: skip
        assumed = sts_client.assume_role(RoleArn=role["Role"]["Arn"], RoleSessionName="game-day")
        c = assumed["Credentials"]
        yield Sts(endpoint, user["Arn"], user_keys,
                  Keys(c["AccessKeyId"], c["SecretAccessKey"], c["SessionToken"]))  # fmt: skip


@pytest.fixture(scope="module")
def sandbox(
    sts: Sts, tmp_path_factory: pytest.TempPathFactory, free_port_base: Callable[[int], int]
) -> Iterator[Sandbox]:
    """An rs1 sandbox whose members check MONGODB-AWS logins with moto's STS."""
    directory = tmp_path_factory.mktemp("aws") / "set"
    spec = build_topology("rs1", port_base=free_port_base(1), aws_sts_url=sts.endpoint)
    aws_users = {sts.user_arn: ["root"],
                 ROLE_SESSIONS: ["clusterMonitor", "readWrite@rsdrill_probe"]}  # fmt: skip
    sandbox = up(directory, spec, EmulatorEngine(), auth=True, aws_users=aws_users)
    yield sandbox
    sandbox.down(grace_s=2.0)
    # A run's host-kill restarts the member with its own start command: no pid file then.
    pid = listening_pid(spec.members[0].port)
    if pid is not None:
        os.kill(pid, signal.SIGKILL)


def _uri(sandbox: Sandbox, keys: Keys | None) -> str:
    host = sandbox.spec.members[0].host
    login = f"{quote(keys.key_id, safe='')}:{quote(keys.secret, safe='')}@" if keys else ""
    uri = f"mongodb://{login}{host}/?replicaSet=rs0&authMechanism=MONGODB-AWS"
    if keys is not None and keys.token:
        uri += f"&authMechanismProperties=AWS_SESSION_TOKEN:{quote(keys.token, safe='')}"
    return uri


def _logged_in_as(authority: dict[str, Any]) -> list[dict[str, str]]:
    return list(authority["authInfo"]["authenticatedUsers"])


def _signed_get_caller_identity(sts: Sts, secret: str) -> tuple[int, bytes]:
    """The request a MONGODB-AWS client signs (signed here with botocore), sent to STS as
    mongod sends it."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    body = b"Action=GetCallerIdentity&Version=2011-06-15"
    headers = {"Content-Type": "application/x-www-form-urlencoded",
               "Content-Length": str(len(body)), "Host": "sts.amazonaws.com",
               "X-MongoDB-Server-Nonce": base64.b64encode(secrets.token_bytes(64)).decode(),
               "X-MongoDB-GS2-CB-Flag": "n"}  # fmt: skip
    signed = AWSRequest(method="POST", url="/", data=body, headers=headers)
    SigV4Auth(Credentials(sts.user.key_id, secret), "sts", "us-east-1").add_auth(signed)
    request = urllib.request.Request(sts.endpoint, data=body, headers=dict(signed.headers),
                                     method="POST")  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_moto_really_checks_the_signature(sts: Sts) -> None:
    # The judge must be able to say no before its yes means anything.
    status, body = _signed_get_caller_identity(sts, sts.user.secret)
    assert status == 200 and sts.user_arn.encode() in body, body
    status, body = _signed_get_caller_identity(sts, sts.user.secret[:-1] + "x")
    assert status == 403 and b"SignatureDoesNotMatch" in body, body


def test_pymongo_logs_in_as_the_callers_arn(sandbox: Sandbox, sts: Sts) -> None:
    with MongoClient(_uri(sandbox, sts.user), serverSelectionTimeoutMS=5000) as mongo:
        users = _logged_in_as(mongo.admin.command("connectionStatus"))
    assert users == [{"user": sts.user_arn, "db": "$external"}]
    # An assumed role's session logs in as the role's `*` user, with the role's grants.
    with MongoClient(_uri(sandbox, sts.role), serverSelectionTimeoutMS=5000) as mongo:
        assert _logged_in_as(mongo.admin.command("connectionStatus")) == [
            {"user": ROLE_SESSIONS, "db": "$external"}
        ]
        with pytest.raises(OperationFailure) as refused:
            mongo.admin.command("replSetStepDown", 1)
        assert refused.value.code == 13
    wrong = Keys(sts.user.key_id, "not-the-secret")
    with (
        MongoClient(_uri(sandbox, wrong), serverSelectionTimeoutMS=5000) as mongo,
        pytest.raises(OperationFailure) as failed,
    ):
        mongo.admin.command("ping")
    assert failed.value.code == 18


def test_rsdrill_logs_in_with_uri_keys_a_session_token_or_the_environment(
    sandbox: Sandbox, sts: Sts, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = sandbox.spec.members[0].host
    for keys, arn in ((sts.user, sts.user_arn), (sts.role, ROLE_SESSIONS)):
        conn = DirectConnection(host, 5.0, ConnectOptions.from_uri(_uri(sandbox, keys)))
        try:
            assert _logged_in_as(conn.command("admin", {"connectionStatus": 1}))[0]["user"] == arn
        finally:
            conn.close()
    # No user in the URI: the AWS SDK's chain, here the environment, as drivers do.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", sts.user.key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", sts.user.secret)
    conn = DirectConnection(host, 5.0, ConnectOptions.from_uri(_uri(sandbox, None)))
    try:
        assert _logged_in_as(conn.command("admin", {"connectionStatus": 1}))[0]["user"] == (
            sts.user_arn
        )
    finally:
        conn.close()
    wrong = DirectConnection(host, 5.0, ConnectOptions.from_uri(_uri(sandbox, Keys(
        sts.user.key_id, "not-the-secret"))))  # fmt: skip
    with pytest.raises(LoginError, match=r"Authentication failed\. \(code 18\)"):
        wrong.hello()
    wrong.close()


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return rsdrill_run(
        [*args],
        capture_output=True, text=True, timeout=240,
        env={**os.environ, "RSDRILL_HOME": str(tmp_path / "home")},
    )  # fmt: skip


def _experiment(tmp_path: Path, sandbox: Sandbox, keys: Keys) -> Path:
    document = catalog("rs1-host-kill")
    document["target"] = {**local_target(sandbox.directory, _uri(sandbox, keys)),
                          "topology": "rs1"}  # fmt: skip
    path = tmp_path / "exp.json"
    path.write_text(json.dumps(document))
    return path


def test_check_refuses_a_wrong_secret_in_one_line(
    sandbox: Sandbox, sts: Sts, tmp_path: Path
) -> None:
    wrong = "wJalrXUtnFEMI/K7MDENG/notTheSecret"
    done = _cli(tmp_path, "check", str(_experiment(tmp_path, sandbox, Keys(sts.user.key_id,
                                                                         wrong))))  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 2, output
    [refusal] = [line for line in output.splitlines() if line.startswith("✘")]
    assert f"login as {sts.user.key_id} failed: Authentication failed. (code 18)" in refusal
    assert wrong not in output and quote(wrong, safe="") not in output
    assert "Traceback" not in output


@pytest.mark.slow
def test_a_run_logs_in_with_mongodb_aws_everywhere_and_leaks_no_secret(
    sandbox: Sandbox, sts: Sts, tmp_path: Path
) -> None:
    experiment = _experiment(tmp_path, sandbox, sts.role)
    checked = _cli(tmp_path, "check", str(experiment))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    out = tmp_path / "out"
    done = _cli(tmp_path, "run", str(experiment), "--out", str(out), "--no-live", "--yes")
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    result = json.loads((out / "result.json").read_text())
    assert result["target"]["server"]["auth_mechanism"] == "MONGODB-AWS"
    m = result["metrics"]
    # The wire-level pollers logged in: the recovery probe and the raw writer measured.
    assert all(v is not None for v in m["recovery_s"].values()) and m["recovery_s"]
    assert m["raw_write_unavailable_s"] is not None and m["acknowledged_writes"] > 0
    outputs = [p for p in [*out.rglob("*"), *(tmp_path / "home").rglob("*")] if p.is_file()]
    for secret in (sts.role.secret, sts.role.token, quote(sts.role.secret, safe="")):
        assert secret and secret not in output
        for path in outputs:
            assert secret not in path.read_text(errors="replace"), path


def test_aws_users_without_an_sts_endpoint_are_refused_in_one_line(
    tmp_path: Path, free_port_base: Callable[[int], int]
) -> None:
    done = _cli(tmp_path, "sandbox", "up", "--dir", str(tmp_path / "set"), "--topology", "rs1",
                "--port-base", str(free_port_base(1)), "--auth",
                "--aws-user", f"arn:aws:iam::{ACCOUNT}:user/drill=root")  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert "give both --aws-user and --aws-sts-url" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert not Sandbox(tmp_path / "set").running()
