"""The member's TCP server: one asyncio task per client connection.

A connection runs its requests one after another, as mongod does. A frame that cannot be a
MongoDB message closes that connection only; the member keeps serving everyone else.
"""

from __future__ import annotations

import asyncio
import itertools
import ssl
import traceback
from typing import Any, Protocol

import bson

from rsdrill import wire
from rsdrill.sandbox.certs import rfc2253_subject
from rsdrill_emulator.connection import Connection
from rsdrill_emulator.errors import CommandError
from rsdrill_emulator.failpoint import CloseConnection
from rsdrill_emulator.request import Request

_reply_ids = itertools.count(1)
_connection_ids = itertools.count(1)


class Handles(Protocol):
    """What answers a server's commands: a member's `Commands`, or a router."""

    connections: int
    certificate_subjects: dict[int, str]

    def forget(self, connection_id: int) -> None: ...

    async def run(self, req: Request) -> dict[str, Any]: ...


class Server:
    """Accepts clients and hands their commands to a member's `Commands` or a router."""

    def __init__(self, commands: Handles) -> None:
        self.commands = commands

    async def serve(
        self, host: str, port: int, tls: ssl.SSLContext | None = None
    ) -> asyncio.Server:
        loop = asyncio.get_running_loop()
        return await loop.create_server(self._accept, host, port, reuse_address=True, ssl=tls)

    def _accept(self) -> Connection:
        return _Served(self)

    async def answer(self, connection: Connection) -> None:
        connection_id = next(_connection_ids)
        self.commands.connections += 1
        # The verified certificate's subject, for MONGODB-X509 (None without TLS or a cert).
        subject = rfc2253_subject(connection.extra("peercert"))
        if subject is not None:
            self.commands.certificate_subjects[connection_id] = subject
        try:
            while True:
                request_id, _, op_code, payload = await connection.frame()
                if not await self._handle(connection, connection_id, request_id, op_code, payload):
                    break
        except (
            ConnectionError,
            wire.WireError,
            OSError,
            CloseConnection,
        ):
            pass
        finally:
            self.commands.connections -= 1
            self.commands.forget(connection_id)
            connection.close()

    async def _handle(
        self,
        connection: Connection,
        connection_id: int,
        request_id: int,
        op_code: int,
        payload: bytes,
    ) -> bool:
        """Answer one frame; False closes the connection."""
        if op_code == wire.OP_COMPRESSED:
            error = CommandError(2, "OP_COMPRESSED is not accepted: no compressor was negotiated")
            connection.write(wire.encode_op_msg(next(_reply_ids), request_id, error.document()))
            await connection.drain()
            return True
        if op_code == wire.OP_MSG:
            message = wire.parse_op_msg(request_id, payload)
        elif op_code == wire.OP_QUERY:
            message = wire.parse_op_query(request_id, payload)
        else:
            return False
        reply = await self._dispatch(message, connection_id)
        if message.more_to_come:
            return True
        if message.op_code == wire.OP_QUERY:
            connection.write(wire.encode_op_reply(next(_reply_ids), request_id, reply))
            await connection.drain()
            return True
        exhaust = message.exhaust_allowed and "topologyVersion" in message.body
        reply_id, responding_to = next(_reply_ids), request_id
        # Exhaust hello: keep answering, with no new request, on every topology change (or
        # after maxAwaitTimeMS); an error ends the stream, as on mongod (no moreToCome).
        while True:
            streaming = exhaust and bool(reply.get("ok"))
            flags = wire.MORE_TO_COME if streaming else 0
            connection.write(wire.encode_op_msg(reply_id, responding_to, reply, flags))
            await connection.drain()
            if not streaming:
                return True
            body = {**message.body, "topologyVersion": reply["topologyVersion"]}
            message = wire.Message(request_id, wire.OP_MSG, body, flags=message.flags)
            reply = await self._dispatch(message, connection_id)
            responding_to, reply_id = reply_id, next(_reply_ids)

    async def _dispatch(self, message: wire.Message, connection_id: int) -> dict[str, Any]:
        body = wire.command_body(message)
        if not body:
            return CommandError(59, "empty command").document()
        name = next(iter(body))
        if message.op_code == wire.OP_QUERY:
            secondary_ok = bool(message.flags & wire.QUERY_SECONDARY_OK)
            if not message.collection.endswith(".$cmd"):
                return CommandError(352, "legacy OP_QUERY is only accepted for commands").document()
            if name in ("$query", "query") and isinstance(body[name], dict):
                body = body[name]
                name = next(iter(body), "")
        else:
            mode = (body.get("$readPreference") or {}).get("mode", "primary")
            secondary_ok = mode != "primary"
        request = Request(wire.database_of(message), name, body, secondary_ok, connection_id)
        try:
            return await self.commands.run(request)
        except CloseConnection:
            raise
        except (bson.errors.BSONError, KeyError, TypeError, ValueError) as exc:
            return CommandError(2, f"{name}: invalid argument: {exc}").document()
        except Exception as exc:  # a bug must not take the member down with it
            traceback.print_exc()
            return CommandError(1, f"internal error in {name}: {exc!r}").document()


class _Served(Connection):
    """A connection whose requests `server` answers, by a task of its own from its first byte."""

    def __init__(self, server: Server) -> None:
        super().__init__()
        self._server = server
        self._task: asyncio.Task[None] | None = None  # held: the loop keeps only weak references

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._task = asyncio.get_running_loop().create_task(self._server.answer(self))
