"""Hostile and unusual bytes on a member's port: the connection ends, the member keeps serving."""

from __future__ import annotations

import socket
import struct

import bson
import pytest

from tests.harness.members import wire_command

OP_MSG, OP_COMPRESSED = 2013, 2012


def _closed_by_peer(sock: socket.socket, timeout: float = 5.0) -> bool:
    sock.settimeout(timeout)
    try:
        return sock.recv(1024) == b""
    except ConnectionResetError:
        return True


def _connect(host: str) -> socket.socket:
    name, port = host.rsplit(":", 1)
    return socket.create_connection((name, int(port)), timeout=5)


@pytest.fixture
def member(replset) -> str:
    return replset("rs1").spec.members[0].host


@pytest.mark.parametrize(
    "frame",
    [
        # Not random bytes: 1 time in ~90 their length field is plausible and the member rightly
        # waits for the rest. An HTTP request ("GET " is a 517 MB length) is the garbage it gets.
        pytest.param(b"GET / HTTP/1.1\r\nHost: member\r\n\r\n" + b"x" * 32, id="garbage"),
        pytest.param(struct.pack("<iiii", 100 * 1024 * 1024, 1, 0, OP_MSG), id="100MB-length"),
        pytest.param(struct.pack("<iiii", -5, 1, 0, OP_MSG), id="negative-length"),
        pytest.param(
            struct.pack("<iiii", 26, 1, 0, OP_MSG) + b"\x00" * 5 + b"\x07" * 5, id="bad-bson"
        ),
        pytest.param(struct.pack("<iiii", 21, 1, 0, 2002) + b"\x00" * 5, id="removed-opcode"),
    ],
)
def test_hostile_frame_closes_only_that_connection(member: str, frame: bytes) -> None:
    bystander = _connect(member)
    with _connect(member) as sock:
        sock.sendall(frame)
        assert _closed_by_peer(sock)
    assert wire_command(member, {"ping": 1, "$db": "admin"})["ok"] == 1.0
    bystander.close()


def test_truncated_frame_then_hang_up(member: str) -> None:
    with _connect(member) as sock:
        sock.sendall(struct.pack("<iiii", 100, 1, 0, OP_MSG) + b"\x00" * 20)
    assert wire_command(member, {"insert": "c", "documents": [{"_id": 1}], "$db": "d"})["n"] == 1


def test_op_compressed_is_refused_with_an_error_reply(member: str) -> None:
    with _connect(member) as sock:
        sock.sendall(struct.pack("<iiii", 25, 9, 0, OP_COMPRESSED) + b"\x00" * 9)
        header = sock.recv(16)
        length, _, response_to, op_code = struct.unpack("<iiii", header)
        body = b""
        while len(body) < length - 16:
            body += sock.recv(length - 16 - len(body))
        reply = bson.decode(body[5:])
    assert (response_to, op_code) == (9, OP_MSG)
    assert reply["ok"] == 0.0 and "OP_COMPRESSED" in reply["errmsg"]


def test_unknown_command_and_missing_db(member: str) -> None:
    unknown = wire_command(member, {"frobnicate": 1, "$db": "admin"})
    assert (unknown["ok"], unknown["code"], unknown["codeName"]) == (0.0, 59, "CommandNotFound")
    no_db = wire_command(member, {"ping": 1})
    assert no_db["ok"] == 0.0 and no_db["code"] == 40571


def test_hello_advertises_no_compressors(member: str) -> None:
    reply = wire_command(
        member, {"hello": 1, "compression": ["zstd", "snappy", "zlib"], "$db": "admin"}
    )
    assert reply["isWritablePrimary"] is True
    assert "compression" not in reply
