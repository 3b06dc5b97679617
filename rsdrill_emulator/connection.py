"""One client connection of a member or router: its frames in, its replies out.

An asyncio protocol rather than a StreamReader and StreamWriter: a request read through streams
costs three `readexactly` coroutines, a buffer copy and a waiter per frame, which profiled as a
tenth of a member's CPU per journaled insert (bench/emulator_vs_ferretdb.py). Here the bytes go
to one buffer and a frame is cut from it when it is whole; its reader waits only when it is not.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from rsdrill import wire

# Reading pauses while a whole frame is buffered and more than this waits behind it: a client
# that pipelines faster than the member answers is held by TCP, not by this process's memory.
_PAUSE_ABOVE_BYTES = 256 * 1024


class Connection(asyncio.Protocol):
    """The transport's bytes as frames, for the one task that serves this connection."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._ended = False  # the peer closed, or the connection was lost
        self._reading_paused = False
        self._writing_paused = False
        self._waiter: asyncio.Future[None] | None = None  # the reader's, for more bytes
        self._drained: asyncio.Future[None] | None = None  # the writer's, for room to write

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports have asyncio.Transport's methods without deriving from it.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        self._wake()
        if len(buffer) > _PAUSE_ABOVE_BYTES and not self._reading_paused and self._whole_frame():
            self._reading_paused = True
            self._transport().pause_reading()

    def eof_received(self) -> bool:
        self._end()
        return False  # close: a client that stops sending gets no more replies, as on mongod

    def connection_lost(self, exc: Exception | None) -> None:
        self._end()

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        drained, self._drained = self._drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)

    async def frame(self) -> tuple[int, int, int, bytes]:
        """The next message: (request_id, response_to, op_code, payload after the header).
        ConnectionResetError once the peer is gone before a whole one came."""
        while True:
            buffer = self._buffer
            if len(buffer) >= wire.HEADER.size:
                length, request_id, response_to, op_code = wire.HEADER.unpack_from(buffer)
                wire.check_length(length)
                if len(buffer) >= length:
                    payload = bytes(memoryview(buffer)[wire.HEADER.size : length])
                    del buffer[:length]
                    return request_id, response_to, op_code, payload
            if self._ended:
                raise ConnectionResetError("the client closed the connection")
            if self._reading_paused:  # the frame is not whole yet: it needs what is held back
                self._reading_paused = False
                self._transport().resume_reading()
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                self._waiter = None

    def write(self, data: bytes) -> None:
        # uvloop's transport raises RuntimeError for a write once closed (and may close before
        # connection_lost is called): a peer gone is the ConnectionError the serving task ends
        # on quietly, as a streamed hello's next answer to a client that left meanwhile.
        transport = self._transport()
        if self._ended or transport.is_closing():
            raise ConnectionResetError("the client closed the connection")
        transport.write(data)

    async def drain(self) -> None:
        """Wait while the transport holds more than its high-water mark unsent."""
        if self._ended:
            raise ConnectionResetError("the client closed the connection")
        if not self._writing_paused:
            return
        drained = self._drained = asyncio.get_running_loop().create_future()
        await drained
        if self._ended:
            raise ConnectionResetError("the client closed the connection")

    def extra(self, name: str) -> Any:
        return self._transport().get_extra_info(name)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def _whole_frame(self) -> bool:
        buffer = self._buffer
        return len(buffer) >= wire.HEADER.size and len(buffer) >= wire.HEADER.unpack_from(buffer)[0]

    def _transport(self) -> asyncio.Transport:
        if self.transport is None:
            raise ConnectionResetError("not connected")
        return self.transport

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _end(self) -> None:
        self._ended = True
        self._wake()
        drained, self._drained = self._drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)
