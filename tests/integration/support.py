"""Helpers for tests that drive real member processes: polling and wire-level clients."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable
from typing import Any

import bson
import pytest
from pymongo import MongoClient

from rsdrill.sandbox.cluster import Sandbox
from rsdrill.sandbox.config import MemberSpec


def wait_until(predicate: Callable[[], Any], timeout: float, what: str, poll: float = 0.02) -> Any:
    """Poll until `predicate()` is truthy; fail the test naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = predicate()
        except Exception:
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(poll)


def member_state(host: str) -> str | None:
    """The member's own view of its state, or None if it does not answer."""
    with MongoClient(
        host, directConnection=True, serverSelectionTimeoutMS=500, socketTimeoutMS=1000
    ) as c:
        status = c.admin.command("replSetGetStatus")
        return next(m["stateStr"] for m in status["members"] if m.get("self"))


def writable_primary(sandbox: Sandbox) -> MemberSpec | None:
    for member in sandbox.spec.members:
        try:
            with MongoClient(member.host, directConnection=True, serverSelectionTimeoutMS=300) as c:
                if c.admin.command("hello").get("isWritablePrimary"):
                    return member
        except Exception:
            continue
    return None


def wire_command(host: str, command: dict[str, Any], timeout: float = 5.0) -> dict[str, Any]:
    """Send one OP_MSG command on a fresh socket and return the reply body (no driver logic)."""
    name, port = host.rsplit(":", 1)
    with socket.create_connection((name, int(port)), timeout=timeout) as sock:
        body = struct.pack("<IB", 0, 0) + bson.encode(command)
        sock.sendall(struct.pack("<iiii", 16 + len(body), 7, 0, 2013) + body)
        header = _recv_exactly(sock, 16)
        length, _, response_to, op_code = struct.unpack("<iiii", header)
        assert (response_to, op_code) == (7, 2013)
        payload = _recv_exactly(sock, length - 16)
        return bson.decode(payload[5:])


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("connection closed")
        data += chunk
    return data
