"""Helpers for tests that drive real member processes: polling and wire-level clients."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from pymongo import MongoClient

from rsdrill.connection import ConnectOptions, DirectConnection
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


def freeze_others(sandbox: Sandbox, primary: MemberSpec, timeout: float) -> list[MemberSpec]:
    """SIGSTOP every member but `primary`, then wait until the primary answers no oplog fetch:
    one already waiting would still carry the next writes into the frozen members' socket
    buffers. A fetch waits a quarter of the election timeout, so this ends well inside it."""
    others = [m for m in sandbox.spec.members if m.host != primary.host]
    for m in others:
        sandbox.stop(m)
    wait_until(lambda: not ops_in_progress(primary.host, rsdrillGetOplog=1), timeout,
               "fetches to end")  # fmt: skip
    return others


def ops_in_progress(host: str, **command: Any) -> list[dict[str, Any]]:
    """The requests the member is answering now (`$currentOp`), those whose command document
    has each of the given fields with the given value."""
    reply = wire_command(host, {"aggregate": 1, "pipeline": [{"$currentOp": {}}], "cursor": {},
                                "$db": "admin"})  # fmt: skip
    ops: list[dict[str, Any]] = reply["cursor"]["firstBatch"]
    return [op for op in ops if all(op["command"].get(k) == v for k, v in command.items())]


def wire_command(host: str, command: dict[str, Any], timeout: float = 5.0) -> dict[str, Any]:
    """Send one OP_MSG command on a fresh connection and return the reply body (no driver)."""
    body = {k: v for k, v in command.items() if k != "$db"}
    conn = DirectConnection(host, timeout, ConnectOptions())
    try:
        return conn.command(command.get("$db"), body)
    finally:
        conn.close()
