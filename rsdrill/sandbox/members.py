"""Asking one sandbox member: a pymongo client to it, its hello, whether it takes writes (its
state: `rsdrill.states.member_state`). Shared by the launcher (`cluster.py`) and the mongod
engine (`mongod.py`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pymongo import MongoClient

from rsdrill.connection import ConnectOptions, DirectConnection, WireClientError
from rsdrill.scram import Credentials

# Short enough that `status` stays snappy when a member hangs, long enough for a busy machine.
QUERY_TIMEOUT_S = 1.0


@contextmanager
def member_client(
    host: str, timeout_s: float = QUERY_TIMEOUT_S, credentials: Credentials | None = None
) -> Iterator[MongoClient[Any]]:
    """A direct connection to one member, with every timeout set to `timeout_s` (logged in
    with `credentials` when the sandbox requires a login)."""
    ms = int(timeout_s * 1000)
    login: dict[str, Any] = {}
    if credentials is not None:
        login = {"username": credentials.user, "password": credentials.password,
                 "authSource": credentials.source}  # fmt: skip
    client: MongoClient[Any] = MongoClient(
        host,
        **login,
        directConnection=True,
        serverSelectionTimeoutMS=ms,
        connectTimeoutMS=ms,
        socketTimeoutMS=ms,
        appname="rsdrill-sandbox",
    )
    try:
        yield client
    finally:
        client.close()


def hello(
    host: str, timeout_s: float = QUERY_TIMEOUT_S, *, options: ConnectOptions
) -> dict[str, Any] | None:
    """The member's hello (isMaster where it has none), or None when it does not answer."""
    conn = DirectConnection(host, timeout_s, options)
    try:
        return conn.hello()
    except WireClientError:
        return None
    finally:
        conn.close()


def is_writable_primary(host: str, options: ConnectOptions) -> bool:
    reply = hello(host, options=options)
    return bool(reply and reply.get("isWritablePrimary"))
