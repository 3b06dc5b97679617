"""Wire framing: round trips, and arbitrary bytes never escape as anything but WireError."""

from __future__ import annotations

import struct

import bson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rsdrill import wire


def _op_msg_payload(
    body: dict,
    sequences: dict[str, list[dict]] | None = None,
    flags: int = 0,
    checksum: bool = False,
) -> bytes:
    out = struct.pack("<I", flags | (wire.CHECKSUM_PRESENT if checksum else 0))
    out += b"\x00" + bson.encode(body)
    for name, docs in (sequences or {}).items():
        section = name.encode() + b"\x00" + b"".join(bson.encode(d) for d in docs)
        out += b"\x01" + struct.pack("<i", 4 + len(section)) + section
    return out + (b"\x12\x34\x56\x78" if checksum else b"")


def test_op_msg_with_document_sequence_and_checksum() -> None:
    payload = _op_msg_payload(
        {"insert": "c", "$db": "d"}, {"documents": [{"_id": 1}, {"_id": 2}]}, checksum=True
    )
    message = wire.parse_op_msg(5, payload)
    assert wire.command_body(message) == {
        "insert": "c",
        "$db": "d",
        "documents": [{"_id": 1}, {"_id": 2}],
    }
    assert wire.database_of(message) == "d"


def test_op_msg_flags() -> None:
    message = wire.parse_op_msg(1, _op_msg_payload({"hello": 1}, flags=wire.MORE_TO_COME))
    assert message.more_to_come and not message.exhaust_allowed
    message = wire.parse_op_msg(1, _op_msg_payload({"hello": 1}, flags=wire.EXHAUST_ALLOWED))
    assert message.exhaust_allowed and not message.more_to_come
    assert wire.database_of(message) == ""


def test_op_query_command_and_op_reply() -> None:
    payload = struct.pack("<i", wire.QUERY_SECONDARY_OK) + b"admin.$cmd\x00"
    payload += struct.pack("<ii", 0, -1) + bson.encode({"isMaster": 1})
    message = wire.parse_op_query(3, payload)
    assert message.body == {"isMaster": 1} and wire.database_of(message) == "admin"
    reply = wire.encode_op_reply(10, 3, {"ok": 1.0})
    length, request_id, response_to, op_code = struct.unpack_from("<iiii", reply)
    assert (length, request_id, response_to, op_code) == (len(reply), 10, 3, wire.OP_REPLY)
    assert struct.unpack_from("<i", reply, 32)[0] == 1  # numberReturned
    assert bson.decode(reply[36:]) == {"ok": 1.0}


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        struct.pack("<I", 0),
        struct.pack("<I", 0) + b"\x02",
        struct.pack("<I", 0) + b"\x00" + struct.pack("<i", 1000) + b"\x00",
        struct.pack("<I", 0) + b"\x01" + struct.pack("<i", 3),
        _op_msg_payload({"a": 1}) + b"\x00" + bson.encode({"b": 1}),
    ],
    ids=["empty", "flags-only", "bad-kind", "oversized-doc", "short-sequence", "two-bodies"],
)
def test_malformed_op_msg_is_a_wire_error(payload: bytes) -> None:
    with pytest.raises(wire.WireError):
        wire.parse_op_msg(1, payload)


@given(st.binary(max_size=200))
def test_arbitrary_bytes_raise_only_wire_error(data: bytes) -> None:
    for parse in (wire.parse_op_msg, wire.parse_op_query):
        try:
            message = parse(1, data)
        except wire.WireError:
            continue
        assert isinstance(message.body, dict)
