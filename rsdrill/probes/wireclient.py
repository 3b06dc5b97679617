"""A minimal blocking MongoDB client: one socket to one member, OP_MSG commands, deadlines.

The failover and recovery probes ask each member directly what it thinks, every 10 to 100 ms. A
driver's monitor would add its own latency after a failure (pymongo re-checks a server at most
every 500 ms), so these probes speak the wire protocol themselves and reconnect at once.
A connection logs in (SCRAM) when credentials are given, or when a run has set the target's
credentials as the default for every connection it opens (`use_credentials`).
"""

from __future__ import annotations

import itertools
import socket
import time
from typing import Any

import bson

from rsdrill import wire
from rsdrill.scram import MECHANISMS, Credentials, ScramClient, ScramError, sasl_conversation

_request_ids = itertools.count(1)


class WireClientError(Exception):
    """The member did not answer in time, refused, or answered something unusable."""

    def __init__(self, message: str, *, timeout: bool = False) -> None:
        super().__init__(message)
        self.timeout = timeout


_default_credentials: Credentials | None = None


def use_credentials(credentials: Credentials | None) -> None:
    """Every DirectConnection opened from now on without credentials of its own logs in with
    these (a run sets its target's; None again when it ends)."""
    global _default_credentials
    _default_credentials = credentials


class LoginError(WireClientError):
    """The member refused the login (wrong password, unknown user, no SCRAM): retrying with
    the same credentials cannot help."""


class DirectConnection:
    """One member; the socket is kept between commands and reopened after any failure."""

    def __init__(self, host: str, timeout_s: float, credentials: Credentials | None = None) -> None:
        self.host = host
        self.timeout_s = timeout_s
        self.credentials = credentials or _default_credentials
        self._sock: socket.socket | None = None

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def command(self, db: str | None, cmd: dict[str, Any]) -> dict[str, Any]:
        """Run one command; the reply body (which may be {ok: 0}); WireClientError otherwise.

        `db` None sends the command without `$db` (only useful to test a server's refusal).
        """
        try:
            return self._roundtrip(db, cmd)
        except TimeoutError as exc:
            self.close()
            raise WireClientError(f"{self.host}: timed out", timeout=True) from exc
        except (OSError, EOFError, wire.WireError, bson.errors.BSONError) as exc:
            self.close()
            raise WireClientError(f"{self.host}: {type(exc).__name__}: {exc}") from exc
        except ScramError as exc:
            self.close()
            user = self.credentials.user if self.credentials else "?"
            raise LoginError(f"{self.host}: login as {user} failed: {exc}") from exc

    def _roundtrip(self, db: str | None, cmd: dict[str, Any]) -> dict[str, Any]:
        # One deadline for the whole command: a socket timeout alone bounds each recv, and a
        # server dripping a byte at a time would never trip it.
        deadline = time.monotonic() + self.timeout_s
        if self._sock is None:
            name, port = self.host.rsplit(":", 1)
            self._sock = socket.create_connection((name, int(port)), timeout=self.timeout_s)
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.credentials is not None:
                self._log_in(self.credentials, deadline)
        return self._exchange(db, cmd, deadline)

    def _log_in(self, credentials: Credentials, deadline: float) -> None:
        """SCRAM on the new socket, within the first command's deadline."""
        mechanism = credentials.mechanism
        if mechanism is None:
            hello = self._exchange("admin", {"hello": 1, "saslSupportedMechs":
                                             f"{credentials.source}.{credentials.user}"},
                                   deadline)  # fmt: skip
            offered = hello.get("saslSupportedMechs") or []
            mechanism = next((m for m in MECHANISMS if m in offered), "SCRAM-SHA-1")
        client = ScramClient(mechanism, credentials.user, credentials.password)
        conversation = sasl_conversation(client)
        request = next(conversation)
        try:
            while True:
                request = conversation.send(self._exchange(credentials.source, request, deadline))
        except StopIteration:
            return

    def _exchange(self, db: str | None, cmd: dict[str, Any], deadline: float) -> dict[str, Any]:
        assert self._sock is not None
        sock = self._sock
        sock.settimeout(_remaining(deadline))
        request_id = next(_request_ids)
        body = cmd if db is None else {**cmd, "$db": db}
        sock.sendall(wire.encode_op_msg(request_id, 0, body))
        header = _recv_exactly(sock, 16, deadline)
        length, _, response_to, op_code = wire.HEADER.unpack(header)
        if not 16 < length <= wire.MAX_MESSAGE_BYTES:
            raise wire.WireError(f"reply length {length}")
        payload = _recv_exactly(sock, length - 16, deadline)
        if op_code != wire.OP_MSG or response_to != request_id:
            raise wire.WireError(f"unexpected reply (opcode {op_code}, to {response_to})")
        return wire.parse_op_msg(response_to, payload).body


def _remaining(deadline: float) -> float:
    """Seconds left before `deadline` (monotonic); TimeoutError once it has passed."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    return left


def _recv_exactly(sock: socket.socket, n: int, deadline: float) -> bytes:
    chunks = []
    while n:
        sock.settimeout(_remaining(deadline))
        chunk = sock.recv(n)
        if not chunk:
            raise EOFError("connection closed by the member")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)
