"""What the SDAM spec needs from a member, as mongod 4.4+ gives it: topologyVersion on
NotPrimary errors, the awaitable (streaming) hello, a forced stepdown, failCommand's modes."""

from __future__ import annotations

import socket
import struct
import threading
import time
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.errors import ServerSelectionTimeoutError

from rsdrill import wire
from rsdrill.sandbox.cluster import Sandbox
from tests.harness.members import wire_command, writable_primary


def _secondary(sandbox: Sandbox) -> str:
    primary = writable_primary(sandbox)
    assert primary is not None
    return next(m.host for m in sandbox.spec.members if m.host != primary.host)


def _hello(host: str) -> dict[str, Any]:
    return wire_command(host, {"hello": 1, "$db": "admin"})


def _fail_command(host: str, mode: Any, **data: Any) -> dict[str, Any]:
    return wire_command(
        host, {"configureFailPoint": "failCommand", "mode": mode, "data": data, "$db": "admin"}
    )


def test_not_primary_errors_carry_the_current_topology_version(replset) -> None:
    sandbox = replset("rs3")
    secondary = _secondary(sandbox)
    current = _hello(secondary)["topologyVersion"]
    refused = wire_command(secondary, {"insert": "c", "documents": [{}], "$db": "test"})
    assert (refused["code"], refused["topologyVersion"]) == (10107, current)
    unreadable = wire_command(secondary, {"find": "c", "$db": "test"})
    assert (unreadable["code"], unreadable["topologyVersion"]) == (13435, current)
    primary = writable_primary(sandbox)
    assert primary is not None
    insert = {"insert": "c", "documents": [{}], "$db": "test"}
    # From a fail point too, and on a writeConcernError; shutdown errors carry none.
    for code, carries in ((11602, True), (189, True), (91, False), (11600, False)):
        assert _fail_command(primary.host, {"times": 1}, failCommands=["insert"], errorCode=code)
        reply = wire_command(primary.host, insert)
        assert reply["code"] == code
        assert ("topologyVersion" in reply) is carries, reply
    _fail_command(primary.host, {"times": 1}, failCommands=["insert"],
                  writeConcernError={"code": 189, "errmsg": "stepped down"})  # fmt: skip
    reply = wire_command(primary.host, insert)
    assert reply["ok"] == 1 and reply["writeConcernError"]["code"] == 189
    assert reply["topologyVersion"] == _hello(primary.host)["topologyVersion"]


def test_a_stepdown_raises_the_counter_a_not_primary_error_then_shows(replset) -> None:
    sandbox = replset("rs3")
    primary = writable_primary(sandbox)
    assert primary is not None
    before = _hello(primary.host)["topologyVersion"]
    assert wire_command(primary.host, {"replSetStepDown": 10, "$db": "admin"})["ok"] == 1
    refused = wire_command(primary.host, {"insert": "c", "documents": [{}], "$db": "test"})
    # A newer version than the client knows: news, not a stale error (SDAM's rule).
    assert refused["code"] == 10107
    assert refused["topologyVersion"]["processId"] == before["processId"]
    assert refused["topologyVersion"]["counter"] > before["counter"]
    again = wire_command(primary.host, {"replSetStepDown": 10, "$db": "admin"})
    assert again["code"] == 10107 and "topologyVersion" in again


def test_awaitable_hello_waits_for_a_change_or_max_await(replset) -> None:
    sandbox = replset("rs3")
    primary = writable_primary(sandbox)
    assert primary is not None
    tv = _hello(primary.host)["topologyVersion"]
    awaited = {"hello": 1, "topologyVersion": tv, "maxAwaitTimeMS": 800, "$db": "admin"}
    started = time.monotonic()
    assert wire_command(primary.host, awaited)["topologyVersion"] == tv
    assert 0.7 <= time.monotonic() - started < 3.0
    older = {**awaited, "topologyVersion": {**tv, "counter": tv["counter"] - 1}}
    started = time.monotonic()
    wire_command(primary.host, older)
    assert time.monotonic() - started < 0.5
    newer = {**awaited, "topologyVersion": {**tv, "counter": tv["counter"] + 1}}
    assert wire_command(primary.host, newer)["code"] == 31382
    assert wire_command(primary.host, {"hello": 1, "maxAwaitTimeMS": 5, "$db": "admin"})["ok"] == 0
    # A stepdown while it waits: the answer comes at once, not after maxAwaitTimeMS.
    stepdown = threading.Timer(
        0.3, wire_command, (primary.host, {"replSetStepDown": 10, "$db": "admin"})
    )
    stepdown.start()
    started = time.monotonic()
    reply = wire_command(primary.host, {**awaited, "maxAwaitTimeMS": 10_000}, timeout=15)
    stepdown.join()
    assert time.monotonic() - started < 2.0
    assert (
        reply["isWritablePrimary"] is False and reply["topologyVersion"]["counter"] > tv["counter"]
    )


class _Exhaust:
    """A raw connection reading an exhaust hello's stream."""

    def __init__(self, host: str) -> None:
        name, port = host.rsplit(":", 1)
        self.sock = socket.create_connection((name, int(port)), timeout=10)

    def send(self, body: dict[str, Any], flags: int = 0) -> None:
        self.sock.sendall(wire.encode_op_msg(1, 0, {**body, "$db": "admin"}, flags))

    def read(self) -> wire.Message:
        header = self._exactly(16)
        length, request_id, _, _ = struct.unpack("<iiii", header)
        return wire.parse_op_msg(request_id, self._exactly(length - 16))

    def _exactly(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
        return data


def test_exhaust_hello_streams_until_an_error_ends_it(replset) -> None:
    member = replset("rs1").spec.members[0].host
    # The stream's second answer fails (skip the first): an error ends it, as on mongod.
    client = {"application": {"name": "streamer"}}
    assert _fail_command(member, {"skip": 2}, failCommands=["hello"], errorCode=1234,
                         appName="streamer")["ok"] == 1  # fmt: skip
    conn = _Exhaust(member)
    try:
        conn.send({"hello": 1, "client": client})
        tv = conn.read().body["topologyVersion"]
        conn.send({"hello": 1, "topologyVersion": tv, "maxAwaitTimeMS": 200},
                  flags=wire.EXHAUST_ALLOWED)  # fmt: skip
        first = conn.read()
        assert first.more_to_come and first.body["ok"] == 1
        second = conn.read()
        assert not second.more_to_come and second.body["code"] == 1234
        conn.send({"ping": 1})  # the connection still serves requests
        assert conn.read().body["ok"] == 1
    finally:
        conn.sock.close()


def test_force_stepdown_needs_no_caught_up_secondary(replset) -> None:
    # MongoDB's election timeout: the primary keeps its role while the test runs.
    sandbox = replset("psa", election_timeout_ms=10_000)
    primary = writable_primary(sandbox)
    assert primary is not None
    secondary = next(m for m in sandbox.spec.members if m.host != primary.host
                     and not m.arbiter_only)  # fmt: skip
    sandbox.kill(secondary)
    # A write the secondary never sees: no one is caught up.
    write = {"insert": "c", "documents": [{}], "writeConcern": {"w": 1}, "$db": "test"}
    assert wire_command(primary.host, write)["ok"] == 1
    unforced = {"replSetStepDown": 10, "secondaryCatchUpPeriodSecs": 1, "$db": "admin"}
    assert wire_command(primary.host, unforced)["code"] == 262
    started = time.monotonic()
    reply = wire_command(primary.host, {"replSetStepDown": 10, "force": True, "$db": "admin"})
    assert reply["ok"] == 1 and time.monotonic() - started < 1.0, reply
    assert _hello(primary.host)["secondary"] is True


def test_fail_command_modes_and_close_connection_on_hello(replset) -> None:
    member = replset("rs1").spec.members[0].host
    ping = {"ping": 1, "$db": "admin"}
    _fail_command(member, {"activationProbability": 0}, failCommands=["ping"], errorCode=8)
    assert all(wire_command(member, ping)["ok"] == 1 for _ in range(20))
    _fail_command(member, {"activationProbability": 1}, failCommands=["ping"], errorCode=8)
    assert wire_command(member, ping)["code"] == 8
    bad = _fail_command(member, {"activationProbability": 2}, failCommands=["ping"])
    assert bad["code"] == 2 and "activationProbability" in bad["errmsg"]
    wire_command(member, {"configureFailPoint": "failCommand", "mode": "off", "$db": "admin"})
    # A handshake that names the application is caught by closeConnection on hello.
    _fail_command(member, "alwaysOn", failCommands=["hello", "isMaster"], closeConnection=True,
                  appName="doomed")  # fmt: skip
    assert _hello(member)["ok"] == 1  # other applications are not touched
    doomed = MongoClient(member, directConnection=True, appName="doomed",
                         serverSelectionTimeoutMS=500)  # fmt: skip
    try:
        with pytest.raises(ServerSelectionTimeoutError, match="closed"):
            doomed.admin.command("ping")
    finally:
        doomed.close()
    assert _fail_command(member, {"times": 0}, failCommands=["ping"])["code"] == 2
