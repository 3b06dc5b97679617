"""Member-to-member connections (rsdrill_emulator/peer.py) against a real TCP server."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from typing import Any

import uvloop

from rsdrill import wire
from rsdrill_emulator.peer import PeerConnection, PeerError


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers each request with its `n`, after its `delay` seconds."""
    with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
        while True:
            request_id, _, _, payload = await wire.read_frame(reader)
            body = wire.parse_op_msg(request_id, payload).body
            await asyncio.sleep(body.get("delay", 0))
            writer.write(wire.encode_op_msg(1, request_id, {"ok": 1.0, "n": body["n"]}))
            await writer.drain()


async def _cancel_then_call() -> dict[str, Any]:
    server = await asyncio.start_server(_echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    conn = PeerConnection(f"127.0.0.1:{port}")
    try:
        # As an election does once it has its majority: stop waiting for a slow voter.
        slow = asyncio.ensure_future(conn.command("admin", {"ping": 1, "n": 1, "delay": 0.2}, 5))
        await asyncio.sleep(0.05)
        slow.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await slow
        await asyncio.sleep(0.3)  # the abandoned request's reply has arrived by now
        return await conn.command("admin", {"ping": 1, "n": 2}, 5)
    finally:
        conn.close()
        server.close()
        await server.wait_closed()


def test_a_cancelled_call_leaves_no_late_reply_for_the_next() -> None:
    # Read as the next call's reply, the late one failed that call: after a member had been
    # frozen, a vote granted in time was lost and the election took another round.
    assert asyncio.run(_cancel_then_call())["n"] == 2


async def _call_after_the_server_closed() -> list[str]:
    """Two commands on one connection, the server resetting it between them (a member killed
    while the connection was idle)."""
    closing: list[asyncio.StreamWriter] = []

    async def answer_then_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        closing.append(writer)
        await _echo(reader, writer)

    server = await asyncio.start_server(answer_then_close, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    conn = PeerConnection(f"127.0.0.1:{port}")
    outcomes = []
    try:
        for n in (1, 2):
            try:
                reply = await conn.command("admin", {"ping": 1, "n": n}, 5)
                outcomes.append(f"reply {reply['n']}")
            except PeerError as exc:
                outcomes.append(f"PeerError {exc}")
            for writer in closing:  # reset, as a killed member's socket answers the next packet
                sock = writer.get_extra_info("socket")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                writer.close()
            closing.clear()
            await asyncio.sleep(0.1)  # the client's transport sees the reset
        return outcomes
    finally:
        conn.close()
        server.close()


def test_a_connection_the_server_closed_is_opened_again_not_written_to() -> None:
    # As the members run, on uvloop: a write on a transport closed under it raises
    # RuntimeError, which no caller expected. A router's replica-set monitor met it on an idle
    # connection to a restarted member and stopped for good (the router then found no primary
    # of that shard: CI, 'could not find a primary of shard0').
    assert uvloop.run(_call_after_the_server_closed()) == ["reply 1", "reply 2"]
