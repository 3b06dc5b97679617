"""A served connection cuts whole frames out of whatever the socket delivers, over real TCP on
loopback: frames split across sends, several in one send, one larger than the point where it
stops reading (it must start reading again, or the frame never completes), a peer that leaves
mid-frame, and a length no message can have."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable

import pytest
import uvloop

from rsdrill import wire
from rsdrill_emulator.connection import Connection


def _frame(request_id: int, payload: bytes) -> bytes:
    return wire.HEADER.pack(16 + len(payload), request_id, 0, wire.OP_MSG) + payload


async def _served(
    send: Callable[[asyncio.StreamWriter], Awaitable[None]], frames: int, *, after_s: float = 0
) -> list[tuple[int, bytes] | BaseException]:
    """What the server side's `frame()` returns, `frames` times or until it raises, while
    `send` writes to it from a client socket; the first asked for `after_s` after sending."""
    accepted: asyncio.Future[Connection] = asyncio.get_running_loop().create_future()

    def accept() -> Connection:
        connection = Connection()
        if not accepted.done():
            accepted.set_result(connection)
        return connection

    server = await asyncio.get_running_loop().create_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    sending = asyncio.create_task(send(writer))
    connection = await accepted
    await asyncio.sleep(after_s)
    got: list[tuple[int, bytes] | BaseException] = []
    try:
        for _ in range(frames):
            request_id, _, op_code, payload = await asyncio.wait_for(connection.frame(), 10)
            assert op_code == wire.OP_MSG
            got.append((request_id, payload))
    except (ConnectionError, wire.WireError) as exc:
        got.append(exc)
    await sending
    writer.close()
    connection.close()
    server.close()
    await server.wait_closed()
    return got


def test_frames_split_across_sends_and_sent_together_come_whole_and_in_order() -> None:
    first, second, third = _frame(1, b"a" * 100), _frame(2, b"b" * 3), _frame(3, b"")

    async def send(writer: asyncio.StreamWriter) -> None:
        for piece in (first[:5], first[5:20], first[20:] + second + third[:7], third[7:]):
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(0.01)

    got = asyncio.run(_served(send, 3))
    assert got == [(1, b"a" * 100), (2, b"b" * 3), (3, b"")]


def test_a_frame_larger_than_the_pause_point_completes_behind_a_whole_one() -> None:
    # A whole frame and then 3 MiB, none of it asked for yet: reading pauses once the first is
    # whole with more behind it, and must resume when the second is asked for and found short.
    small, large = _frame(1, b"s" * 10), _frame(2, bytes(range(256)) * (3 * 4096))

    async def send(writer: asyncio.StreamWriter) -> None:
        writer.write(small + large)
        await writer.drain()

    got = asyncio.run(_served(send, 2, after_s=0.5))
    assert got == [(1, b"s" * 10), (2, large[16:])]


def test_a_peer_that_leaves_mid_frame_ends_the_connection() -> None:
    async def send(writer: asyncio.StreamWriter) -> None:
        writer.write(_frame(1, b"x") + _frame(2, b"y" * 50)[:30])
        await writer.drain()
        writer.close()

    got = asyncio.run(_served(send, 3))
    assert got[0] == (1, b"x")
    assert len(got) == 2 and isinstance(got[1], ConnectionResetError), got


@pytest.mark.parametrize("length", [15, wire.MAX_MESSAGE_BYTES + 1])
def test_a_length_no_message_can_have_is_a_wire_error(length: int) -> None:
    async def send(writer: asyncio.StreamWriter) -> None:
        writer.write(struct.pack("<iiii", length, 1, 0, wire.OP_MSG))
        await writer.drain()

    got = asyncio.run(_served(send, 1))
    assert len(got) == 1 and isinstance(got[0], wire.WireError), got


def test_an_answer_to_a_peer_that_left_is_a_connection_reset_on_uvloop() -> None:
    # The member's loop is uvloop's, whose transport raises RuntimeError for a write once it is
    # closed (asyncio's drops the bytes): a streamed hello's next answer to a client gone meanwhile
    # ended its task on that error, logged as a traceback in every member's log.
    async def main() -> None:
        loop = asyncio.get_running_loop()
        accepted: asyncio.Future[Connection] = loop.create_future()

        def accept() -> Connection:
            connection = Connection()
            accepted.set_result(connection)
            return connection

        server = await loop.create_server(accept, "127.0.0.1", 0)
        _, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
        connection = await accepted
        writer.close()
        await writer.wait_closed()
        with pytest.raises(ConnectionResetError):
            await asyncio.wait_for(connection.frame(), 10)
        await asyncio.sleep(0.1)  # the transport's handle is closed after connection_lost
        with pytest.raises(ConnectionResetError):
            connection.write(b"an answer")
        server.close()
        await server.wait_closed()

    loop = uvloop.new_event_loop()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
