"""Sandbox modes that real deployments have, judged by pymongo (the outside check): a standalone
server (on disk or in memory) and members that answer only the legacy isMaster handshake."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient, WriteConcern
from pymongo.errors import OperationFailure
from pymongo.server_type import SERVER_TYPE

from rsdrill.connection import ConnectOptions, DirectConnection, handshake_form
from rsdrill.deployment import inspect
from rsdrill.sandbox.cluster import EmulatorEngine, Sandbox, up
from rsdrill.sandbox.config import Settings, build_topology
from tests.harness.cli import rsdrill_run


def _client(uri: str) -> MongoClient[Any]:
    return MongoClient(uri, serverSelectionTimeoutMS=5000)


def _standalone(directory: Path, port: int, storage: str = "disk") -> Sandbox:
    return up(directory, build_topology("standalone", port_base=port, storage=storage),
              EmulatorEngine())  # fmt: skip


def test_pymongo_sees_a_standalone_server(
    sandbox_dir: Path, free_port_base: Callable[[int], int]
) -> None:
    sandbox = _standalone(sandbox_dir, free_port_base(1))
    assert "replicaSet" not in sandbox.uri
    with _client(sandbox.uri) as client:
        things = client.drill.get_collection("things", write_concern=WriteConcern("majority"))
        things.insert_one({"x": 1})  # retryable by default: pymongo sends no txnNumber here
        [server] = client.topology_description.server_descriptions().values()
        assert server.server_type == SERVER_TYPE.Standalone
        assert client.topology_description.topology_type_name == "Single"
        with pytest.raises(OperationFailure) as refused:
            client.admin.command("replSetGetStatus")
        assert (refused.value.code, refused.value.details["codeName"]) == (
            76,
            "NoReplicationEnabled",
        )
        with pytest.raises(OperationFailure) as w2:
            client.drill.get_collection("things", write_concern=WriteConcern(2)).insert_one({})
        assert w2.value.code == 2
    facts = inspect(sandbox.spec.members[0].host, options=sandbox.connect_options)
    assert (facts.topology, facts.emulator, facts.storage_engine) == (
        "standalone",
        True,
        "rsdrill-sqlite",
    )
    assert [s.state for s in sandbox.status()] == ["STANDALONE"]


@pytest.mark.parametrize(("storage", "kept"), [("disk", 1), ("memory", 0)])
def test_a_restart_keeps_journaled_writes_on_disk_and_nothing_in_memory(
    sandbox_dir: Path, free_port_base: Callable[[int], int], storage: str, kept: int
) -> None:
    sandbox = _standalone(sandbox_dir, free_port_base(1), storage)
    member = sandbox.spec.members[0]
    with _client(sandbox.uri) as client:
        journaled = client.drill.get_collection("t", write_concern=WriteConcern(1, j=True))
        journaled.insert_one({"_id": 1})
    sandbox.kill(member)
    sandbox.start(member)
    with _client(sandbox.uri) as client:
        assert client.drill.t.count_documents({}) == kept
        engine = client.admin.command("serverStatus")["storageEngine"]
    assert engine == {"name": f"rsdrill-{'memory' if storage == 'memory' else 'sqlite'}",
                      "persistent": storage == "disk"}  # fmt: skip


def test_pymongo_and_rsdrill_reach_members_without_hello(
    sandbox_dir: Path, free_port_base: Callable[[int], int]
) -> None:
    spec = build_topology("rs3", port_base=free_port_base(3), handshake="legacy",
                          settings=Settings(election_timeout_ms=1000))  # fmt: skip
    sandbox = up(sandbox_dir, spec, EmulatorEngine())
    with _client(sandbox.uri) as client:
        client.drill.get_collection("t", write_concern=WriteConcern("majority")).insert_one({})
        assert client.drill.t.count_documents({}) == 1
        assert client.server_info()["version"] == "4.4.1"
        with pytest.raises(OperationFailure) as refused:
            client.admin.command("hello")
        assert refused.value.code == 59
    host = spec.members[1].host
    conn = DirectConnection(host, 2.0, ConnectOptions())
    try:
        reply = conn.hello()
    finally:
        conn.close()
    assert reply["setName"] == "rs0" and "isWritablePrimary" in reply and "ismaster" in reply
    assert handshake_form(host) == "isMaster"
    assert inspect(host, options=ConnectOptions()).handshake == "isMaster"


def test_memory_storage_is_for_a_standalone_only(tmp_path: Path) -> None:
    done = rsdrill_run(
        ["sandbox", "up", "--topology", "rs3",
         "--storage", "memory", "--dir", str(tmp_path / "s")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "rsdrill: in-memory storage is for a standalone server (--topology standalone)"
    )
    assert not (tmp_path / "s").exists()


def test_x509_without_tls_is_refused(tmp_path: Path) -> None:
    done = rsdrill_run(
        ["sandbox", "up", "--topology", "rs3", "--x509",
         "--dir", str(tmp_path / "s")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert "x.509 logins need TLS" in done.stderr and "Traceback" not in done.stderr
