"""A sandbox that requires TLS, with x.509 or SCRAM logins: pymongo (the outside check) and
rsdrill's own member connections get in with the sandbox's CA and certificates only."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from pymongo import MongoClient, WriteConcern
from pymongo.errors import PyMongoError

from rsdrill.connection import ConnectOptions, DirectConnection, TlsError, WireClientError
from rsdrill.sandbox.certs import CLIENT_SUBJECT, issue, new_authority, tls_files
from rsdrill.sandbox.cluster import EmulatorEngine, Sandbox, up
from rsdrill.sandbox.config import Settings, build_topology


def _up(directory: Path, port_base: int, *, x509: bool, auth: bool = False) -> Sandbox:
    spec = build_topology("rs3", port_base=port_base, settings=Settings(election_timeout_ms=1000),
                          tls=True, x509=x509)  # fmt: skip
    return up(directory, spec, EmulatorEngine(), auth=auth)


@pytest.fixture
def x509_set(sandbox_dir: Path, free_port_base: Callable[[int], int]) -> Sandbox:
    return _up(sandbox_dir, free_port_base(3), x509=True)


def _client(uri: str, **options: Any) -> MongoClient[Any]:
    return MongoClient(uri, serverSelectionTimeoutMS=3000, connectTimeoutMS=2000, **options)


def _fails(uri: str) -> bool:
    try:
        with _client(uri, directConnection=True) as client:
            client.admin.command("ping")
    except PyMongoError:
        return True
    return False


def test_pymongo_writes_over_tls_with_an_x509_login(x509_set: Sandbox) -> None:
    uri = x509_set.uri
    assert "tls=true" in uri and "authMechanism=MONGODB-X509" in uri
    with _client(uri) as client:
        things = client.drill.get_collection("things", write_concern=WriteConcern("majority"))
        things.insert_one({"x": 1})
        assert things.count_documents({}) == 1
        status = client.admin.command("connectionStatus")
        assert status["authInfo"]["authenticatedUsers"] == [
            {"user": CLIENT_SUBJECT, "db": "$external"}
        ]


def test_nothing_without_tls_or_without_the_client_certificate(x509_set: Sandbox) -> None:
    host = x509_set.spec.members[1].host
    ca = tls_files(x509_set.directory).ca
    assert _fails(f"mongodb://{host}/")  # plain TCP
    assert _fails(f"mongodb://{host}/?tls=true&tlsCAFile={quote(str(ca))}")  # no client cert
    conn = DirectConnection(host, 2.0, ConnectOptions.from_uri(
        f"mongodb://{host}/?tls=true&tlsCAFile={quote(str(ca))}"))  # fmt: skip
    with pytest.raises(TlsError, match="rejected the client certificate"):
        conn.command("admin", {"ping": 1})


def test_a_certificate_from_another_ca_is_refused_by_name(
    x509_set: Sandbox, tmp_path: Path
) -> None:
    foreign = tmp_path / "foreign.pem"
    foreign.write_bytes(issue(new_authority("someone else"), CLIENT_SUBJECT))
    uri = x509_set.uri.replace(quote(str(tls_files(x509_set.directory).client)), str(foreign))
    assert str(foreign) in uri
    assert _fails(uri.replace("replicaSet=rs0", "directConnection=false&replicaSet=rs0"))
    host = x509_set.spec.members[0].host
    with pytest.raises(TlsError):
        DirectConnection(host, 2.0, ConnectOptions.from_uri(uri)).command("admin", {"ping": 1})
    # A CA that did not sign the members' certificate: the member is not trusted.
    other_ca = tmp_path / "other-ca.pem"
    other_ca.write_bytes(new_authority("other").pem())
    untrusted = x509_set.uri.replace(quote(str(tls_files(x509_set.directory).ca)), str(other_ca))
    with pytest.raises(TlsError, match="certificate is not trusted"):
        DirectConnection(host, 2.0, ConnectOptions.from_uri(untrusted)).command(
            "admin", {"ping": 1}
        )


def test_rsdrills_connections_log_in_by_certificate(x509_set: Sandbox) -> None:
    options = ConnectOptions.from_uri(x509_set.uri)
    assert options.tls is not None and options.credentials is not None
    assert options.credentials.mechanism == "MONGODB-X509"
    for member in x509_set.spec.members:
        conn = DirectConnection(member.host, 2.0, options)
        try:
            assert conn.command("admin", {"replSetGetStatus": 1})["ok"] == 1
            status = conn.command("admin", {"connectionStatus": 1})
            assert status["authInfo"]["authenticatedUsers"][0]["user"] == CLIENT_SUBJECT
        finally:
            conn.close()


def test_the_set_fails_over_over_tls(x509_set: Sandbox) -> None:
    """Heartbeats, votes and replication between members all run over TLS with x.509."""
    primary = next(m for m in x509_set.spec.members if x509_set.status()[m.id].state == "PRIMARY")
    with _client(x509_set.uri) as client:
        client.drill.get_collection("t", write_concern=WriteConcern("majority")).insert_one({})
        x509_set.kill(primary)
        deadline = time.monotonic() + 15
        while True:
            try:
                client.drill.get_collection("t", write_concern=WriteConcern("majority")
                                            ).insert_one({})  # fmt: skip
                break
            except PyMongoError:
                assert time.monotonic() < deadline, "no new primary over TLS"
                time.sleep(0.1)
        assert client.drill.t.count_documents({}) == 2


def test_tls_with_a_scram_login(sandbox_dir: Path, free_port_base: Callable[[int], int]) -> None:
    sandbox = _up(sandbox_dir, free_port_base(3), x509=False, auth=True)
    uri = sandbox.uri
    assert "tls=true" in uri and "MONGODB-X509" not in uri
    with _client(uri) as client:
        client.drill.things.insert_one({"x": 1})
        assert client.drill.things.count_documents({}) == 1
    conn = DirectConnection(sandbox.spec.members[2].host, 2.0, ConnectOptions.from_uri(uri))
    try:
        assert conn.command("admin", {"replSetGetStatus": 1})["ok"] == 1
    finally:
        conn.close()
    # Without the password, TLS alone lets nobody in.
    no_login = uri.split("@", 1)[1]
    conn = DirectConnection(sandbox.spec.members[0].host, 2.0,
                            ConnectOptions.from_uri(f"mongodb://{no_login}"))  # fmt: skip
    try:
        assert conn.command("admin", {"replSetGetStatus": 1})["code"] == 13
    finally:
        conn.close()
    with pytest.raises(WireClientError):
        DirectConnection(sandbox.spec.members[0].host, 1.0, ConnectOptions()).command(
            "admin", {"ping": 1}
        )
