"""A sandbox that requires a login: pymongo (a real SCRAM client) and rsdrill's own wire client
log in with the right password only; nothing but the handshake works before a login."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.errors import OperationFailure

from rsdrill.connection import ConnectOptions, DirectConnection, WireClientError
from rsdrill.sandbox.cluster import EmulatorEngine, Sandbox, up
from rsdrill.sandbox.config import Settings, build_topology
from rsdrill.scram import Credentials
from tests.harness.cli import rsdrill_run


@pytest.fixture
def locked(sandbox_dir: Path, free_port_base: Callable[[int], int]) -> Sandbox:
    spec = build_topology(
        "rs3", port_base=free_port_base(3), settings=Settings(election_timeout_ms=1000)
    )
    return up(sandbox_dir, spec, EmulatorEngine(), auth=True)


def _client(uri: str, **options: Any) -> MongoClient[Any]:
    return MongoClient(uri, serverSelectionTimeoutMS=10_000, connectTimeoutMS=2000, **options)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-1"])
def test_pymongo_logs_in_with_the_password_only(locked: Sandbox, mechanism: str) -> None:
    login = locked.credentials
    assert login is not None
    with _client(locked.uri, authMechanism=mechanism) as client:
        client.drill.things.insert_one({"x": 1})
        assert client.drill.things.count_documents({}) == 1
    wrong = locked.uri.replace(f":{login.password}@", ":not-it@")
    with _client(wrong, authMechanism=mechanism) as client, pytest.raises(OperationFailure) as err:
        client.drill.things.find_one()
    assert err.value.code == 18


def test_users_info_lists_the_sandboxs_users(locked: Sandbox) -> None:
    login = locked.credentials
    assert login is not None
    with _client(locked.uri) as client:
        users = client.admin.command("usersInfo")["users"]
        assert [(u["_id"], u["roles"]) for u in users] == [
            (f"admin.{login.user}", [{"role": "root", "db": "admin"}])
        ]
        assert client.admin.command("usersInfo", "nobody")["users"] == []
        assert client.drill.command("usersInfo")["users"] == []  # all are defined on admin


def test_nothing_but_the_handshake_before_a_login(locked: Sandbox) -> None:
    host = locked.spec.members[1].host
    conn = DirectConnection(host, 2.0, ConnectOptions())
    assert conn.command("admin", {"hello": 1})["setName"] == "rs0"
    refused = conn.command("admin", {"replSetGetStatus": 1})
    assert (refused["ok"], refused["code"]) == (0, 13)
    conn.close()


def test_the_wire_client_logs_in_as_the_uris_user(locked: Sandbox) -> None:
    login = ConnectOptions.from_uri(locked.uri)
    assert login.credentials is not None and login.credentials.user == "rsdrill"
    conn = DirectConnection(locked.spec.members[0].host, 2.0, login)
    assert conn.command("admin", {"replSetGetStatus": 1})["ok"] == 1
    # The socket stays logged in: a second command needs no new login.
    assert conn.command("admin", {"replSetGetStatus": 1})["ok"] == 1
    conn.close()
    wrong = DirectConnection(
        locked.spec.members[0].host, 2.0, ConnectOptions(Credentials("rsdrill", "x"))
    )
    with pytest.raises(WireClientError) as err:
        wrong.command("admin", {"replSetGetStatus": 1})
    assert "login as rsdrill failed: Authentication failed. (code 18)" in str(err.value)
    assert "'x'" not in str(err.value)


def test_the_password_file_is_private_and_never_printed(locked: Sandbox) -> None:
    path = locked.directory / "auth.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    password = json.loads(path.read_text())["password"]
    assert len(password) >= 24
    shown = rsdrill_run(
        ["sandbox", "status", "--dir",
         str(locked.directory)],
        capture_output=True, text=True, timeout=60, env=os.environ.copy(),
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert "PRIMARY" in shown.stdout and "mongodb://rsdrill:***@" in shown.stdout
    assert password not in shown.stdout + shown.stderr
