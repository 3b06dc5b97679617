"""Tiny TCP servers on loopback that are not MongoDB and behave badly, for deadline tests.

- `silent`: accepts every connection, reads whatever comes, never answers;
- `garbage`: answers every read with random bytes (a length that does not fit, junk opcodes);
- `reset`: accepts and at once resets the connection (RST, not FIN);
- `drip`: answers with a header announcing a 1 MB reply, then one byte every 50 ms (a reader
  whose timeout is per `recv` instead of per reply would wait for almost 14 hours);
- `mongodb42`: a well-formed server that says it is MongoDB 4.2 (older than rsdrill supports);
- `impatient`: a well-formed primary whose hello carries a topologyVersion, but which answers an
  awaitable hello at once instead of holding it.
"""

from __future__ import annotations

import os
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

KINDS = ("silent", "garbage", "reset", "drip")


def _requests(conn: socket.socket, stop: threading.Event) -> Iterator[bytes]:
    """What the client sends, chunk by chunk, until it hangs up or the server stops."""
    conn.settimeout(0.2)
    while not stop.is_set():
        try:
            chunk = conn.recv(65536)
        except TimeoutError:
            continue
        if not chunk:
            return
        yield chunk


def _silent(conn: socket.socket, stop: threading.Event) -> None:
    for _ in _requests(conn, stop):
        pass


def _garbage(conn: socket.socket, stop: threading.Event) -> None:
    for _ in _requests(conn, stop):
        conn.sendall(os.urandom(16 + os.urandom(1)[0]))


def _reset(conn: socket.socket, stop: threading.Event) -> None:
    # SO_LINGER with a zero timeout: close() sends RST.
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def _drip(conn: socket.socket, stop: threading.Event) -> None:
    if next(_requests(conn, stop), None) is None:
        return
    # A well-formed header: length 1 MB, request id 1, response to 1, OP_MSG.
    conn.sendall(struct.pack("<iiii", 1 << 20, 1, 1, 2013))
    while not stop.wait(0.05):
        conn.sendall(b"\0")


def _mongodb42(conn: socket.socket, stop: threading.Event) -> None:
    _answer(conn, stop, {
        "hello": {"ok": 1.0, "isWritablePrimary": True, "maxWireVersion": 8, "minWireVersion": 0},
        "buildinfo": {"ok": 1.0, "version": "4.2.24", "versionArray": [4, 2, 24, 0]},
    })  # fmt: skip


def _impatient(conn: socket.socket, stop: threading.Event) -> None:
    topology = {"processId": b"0" * 12, "counter": 0}
    hello = {"ok": 1.0, "isWritablePrimary": True, "maxWireVersion": 21, "minWireVersion": 0,
             "topologyVersion": topology}  # fmt: skip
    _answer(conn, stop, {"hello": hello})


def _secondary(conn: socket.socket, stop: threading.Event) -> None:
    """A secondary, as far as a write can tell: every insert refused with NotWritablePrimary."""
    refused = {"ok": 0.0, "errmsg": "not primary", "code": 10107, "codeName": "NotWritablePrimary"}
    _answer(conn, stop, {"insert": refused})


def _answer(conn: socket.socket, stop: threading.Event, replies: dict[str, dict]) -> None:
    """Answer every command at once from `replies` by lower-cased name ({ok: 1} otherwise)."""
    from rsdrill import wire

    buffer = b""
    for chunk in _requests(conn, stop):
        buffer += chunk
        while len(buffer) >= 16:
            length, request_id, _, _ = struct.unpack("<iiii", buffer[:16])
            if len(buffer) < length:
                break
            body = wire.parse_op_msg(request_id, buffer[16:length]).body
            buffer = buffer[length:]
            name = next(iter(body)).lower()
            reply = replies.get("hello" if name == "ismaster" else name, {"ok": 1.0})
            conn.sendall(wire.encode_op_msg(1, request_id, reply))


_HANDLERS: dict[str, Callable[[socket.socket, threading.Event], None]] = {
    "silent": _silent,
    "garbage": _garbage,
    "reset": _reset,
    "drip": _drip,
    "mongodb42": _mongodb42,
    "impatient": _impatient,
    "secondary": _secondary,
}


@contextmanager
def hostile_server(kind: str) -> Iterator[str]:
    """Serve `kind` on 127.0.0.1 until the block ends; yields `host:port`."""
    handler = _HANDLERS[kind]
    stop = threading.Event()
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    listener.settimeout(0.1)

    def serve(conn: socket.socket) -> None:
        try:
            handler(conn, stop)
        except OSError:
            pass  # the client went away
        finally:
            conn.close()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(2)
        listener.close()


@contextmanager
def hostile_servers(*kinds: str) -> Iterator[list[str]]:
    """Several hostile servers at once; yields their `host:port`s in order."""
    if not kinds:
        yield []
        return
    with hostile_server(kinds[0]) as first, hostile_servers(*kinds[1:]) as rest:
        yield [first, *rest]


def within(deadline_s: float, fn: Callable[[], object]) -> float:
    """Call fn and return how long it took, failing if it took longer than `deadline_s`."""
    started = time.monotonic()
    fn()
    took = time.monotonic() - started
    assert took <= deadline_s, f"took {took:.1f}s, deadline {deadline_s}s"
    return took
