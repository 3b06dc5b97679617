"""Member-to-member calls over the wire protocol (heartbeats, votes, oplog fetches, cloning)."""

from __future__ import annotations

import asyncio
import itertools
import ssl
from typing import Any

import bson

from rsdrill import wire
from rsdrill.scram import Credentials, ScramClient, ScramError, sasl_conversation

_request_ids = itertools.count(1)


class PeerError(Exception):
    """The peer could not be reached, did not answer in time, or answered garbage."""

    def __init__(self, message: str, *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out  # no answer in time (cut off, frozen): not a refusal or reset


class PeerConnection:
    """One TCP connection to another member; requests on it are sequential."""

    def __init__(
        self,
        host: str,
        credentials: Credentials | None = None,
        tls: ssl.SSLContext | None = None,
        x509: bool = False,
    ) -> None:
        self.host = host
        self.credentials = credentials
        self.tls = tls
        self.x509 = x509
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._lock = asyncio.Lock()

    async def _connect(self, timeout: float) -> None:
        name, port = self.host.rsplit(":", 1)
        self._reader, self._writer = await asyncio.wait_for(
            asyncio.open_connection(
                name, int(port), ssl=self.tls, server_hostname=name if self.tls else None
            ),
            timeout,
        )
        if self.x509:  # as x.509 member authentication: the certificate says who we are
            reply = await self._exchange(
                "$external", {"authenticate": 1, "mechanism": "MONGODB-X509"}
            )
            if reply.get("ok") != 1:
                raise wire.WireError(f"x.509 login failed: {reply.get('errmsg')}")
        elif self.credentials is not None:
            await self._log_in(self.credentials)

    async def _log_in(self, credentials: Credentials) -> None:
        client = ScramClient("SCRAM-SHA-256", credentials.user, credentials.password)
        conversation = sasl_conversation(client)
        request = next(conversation)
        try:
            while True:
                reply = await self._exchange(credentials.source, request)
                request = conversation.send(reply)
        except StopIteration:
            return
        except ScramError as exc:
            raise wire.WireError(f"login as {credentials.user} failed: {exc}") from exc

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None

    async def command(self, db: str, cmd: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Run a command; any failure closes the connection and raises PeerError."""
        async with self._lock:
            try:
                return await asyncio.wait_for(self._roundtrip(db, cmd, timeout), timeout)
            except (
                OSError,
                EOFError,
                TimeoutError,
                asyncio.IncompleteReadError,
                wire.WireError,
                bson.errors.BSONError,
                # uvloop's word for a write on a transport closed under it (reset between
                # the check above and the write): a lost connection like the others.
                RuntimeError,
            ) as exc:
                self.close()
                raise PeerError(
                    f"{self.host}: {type(exc).__name__}: {exc}",
                    timed_out=isinstance(exc, TimeoutError),
                ) from exc
            except asyncio.CancelledError:
                # Cancelled mid-call (an election that had its majority stops asking): the
                # request may be on the wire, and its late reply must not be read as the next
                # request's (which then failed, costing an election a whole round).
                self.close()
                raise

    async def _roundtrip(self, db: str, cmd: dict[str, Any], timeout: float) -> dict[str, Any]:
        if self._writer is not None and self._writer.is_closing():
            self.close()  # reset while idle (the member was killed): open a new one
        if self._writer is None:
            await self._connect(timeout)
        return await self._exchange(db, cmd)

    async def _exchange(self, db: str, cmd: dict[str, Any]) -> dict[str, Any]:
        assert self._reader is not None and self._writer is not None
        request_id = next(_request_ids)
        self._writer.write(wire.encode_op_msg(request_id, 0, {**cmd, "$db": db}))
        await self._writer.drain()
        _, response_to, op_code, payload = await wire.read_frame(self._reader)
        if op_code != wire.OP_MSG or response_to != request_id:
            raise wire.WireError(f"unexpected reply opcode {op_code} to {response_to}")
        return wire.parse_op_msg(response_to, payload).body


class Peers:
    """Connections to every other member, one per purpose, created on demand."""

    def __init__(
        self,
        credentials: Credentials | None = None,
        *,
        tls: ssl.SSLContext | None = None,
        x509: bool = False,
    ) -> None:
        self._conns: dict[tuple[str, str], PeerConnection] = {}
        self.credentials = credentials
        self.tls = tls
        self.x509 = x509

    def connection(self, host: str, purpose: str) -> PeerConnection:
        key = (host, purpose)
        conn = self._conns.get(key)
        if conn is None:
            conn = self._conns[key] = PeerConnection(host, self.credentials, self.tls, self.x509)
        return conn

    async def call(
        self, host: str, cmd: dict[str, Any], *, purpose: str, timeout: float, db: str = "admin"
    ) -> dict[str, Any]:
        return await self.connection(host, purpose).command(db, cmd, timeout)

    def close_all(self) -> None:
        for conn in self._conns.values():
            conn.close()
