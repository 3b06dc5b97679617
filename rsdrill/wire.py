"""MongoDB wire protocol framing: OP_MSG, the legacy OP_QUERY handshake and its OP_REPLY.

Only framing lives here; what a command means is decided elsewhere. Every malformed frame
raises `WireError`, on which the server closes that one connection.
"""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass, field
from typing import Any

import bson

OP_REPLY = 1
OP_QUERY = 2004
OP_COMPRESSED = 2012
OP_MSG = 2013

CHECKSUM_PRESENT = 1 << 0
MORE_TO_COME = 1 << 1
EXHAUST_ALLOWED = 1 << 16

# OP_QUERY flag: the client accepts answers from a secondary.
QUERY_SECONDARY_OK = 1 << 2

MAX_MESSAGE_BYTES = 48_000_000
MAX_BSON_BYTES = 16 * 1024 * 1024

HEADER = struct.Struct("<iiii")
_INT32 = struct.Struct("<i")
_UINT32 = struct.Struct("<I")


class WireError(Exception):
    """A frame that cannot be a valid MongoDB message; the connection is closed."""


@dataclass
class Message:
    """One decoded request."""

    request_id: int
    op_code: int
    body: dict[str, Any]
    flags: int = 0
    # OP_QUERY only: the collection the query was addressed to, e.g. "admin.$cmd".
    collection: str = ""
    sequences: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def more_to_come(self) -> bool:
        return self.op_code == OP_MSG and bool(self.flags & MORE_TO_COME)

    @property
    def exhaust_allowed(self) -> bool:
        return self.op_code == OP_MSG and bool(self.flags & EXHAUST_ALLOWED)


async def read_frame(reader: asyncio.StreamReader) -> tuple[int, int, int, bytes]:
    """Read one message: (request_id, response_to, op_code, payload after the header)."""
    header = await reader.readexactly(16)
    length, request_id, response_to, op_code = HEADER.unpack(header)
    check_length(length)
    payload = await reader.readexactly(length - 16)
    return request_id, response_to, op_code, payload


def check_length(length: int) -> None:
    """A header's message length, or WireError when no message can have it."""
    if length < HEADER.size or length > MAX_MESSAGE_BYTES:
        raise WireError(f"message length {length} outside 16..{MAX_MESSAGE_BYTES}")


def _decode_doc(data: bytes, offset: int, end: int | None = None) -> tuple[dict[str, Any], int]:
    """The document at `offset`, which must end by `end` (default: the data's end)."""
    end = len(data) if end is None else end
    if offset + 4 > end:
        raise WireError("truncated BSON document")
    (size,) = _INT32.unpack_from(data, offset)
    if size < 5 or offset + size > end:
        raise WireError(f"BSON document size {size} does not fit the message")
    try:
        doc = bson.decode(data[offset : offset + size])
    except Exception as exc:
        raise WireError(f"invalid BSON: {exc}") from exc
    return doc, offset + size


def _cstring(data: bytes, offset: int, limit: int | None = None) -> tuple[str, int]:
    end = data.find(b"\x00", offset, len(data) if limit is None else limit)
    if end < 0:
        raise WireError("unterminated C string")
    try:
        return data[offset:end].decode(), end + 1
    except UnicodeDecodeError as exc:
        raise WireError("C string is not UTF-8") from exc


def parse_op_msg(request_id: int, payload: bytes) -> Message:
    """Decode an OP_MSG payload: flags, one body section, any document sequences."""
    if len(payload) < 5:
        raise WireError("OP_MSG too short")
    (flags,) = _UINT32.unpack_from(payload, 0)
    end = len(payload) - 4 if flags & CHECKSUM_PRESENT else len(payload)
    offset = 4
    body: dict[str, Any] | None = None
    sequences: dict[str, list[dict[str, Any]]] = {}
    while offset < end:
        kind = payload[offset]
        offset += 1
        if kind == 0:
            if body is not None:
                raise WireError("OP_MSG has more than one body section")
            body, offset = _decode_doc(payload, offset, end)
        elif kind == 1:
            if offset + 4 > end:
                raise WireError("truncated document sequence")
            (size,) = _INT32.unpack_from(payload, offset)
            seq_end = offset + size
            if size < 5 or seq_end > end:
                raise WireError("document sequence size does not fit the message")
            name, pos = _cstring(payload, offset + 4, seq_end)
            docs = []
            while pos < seq_end:
                doc, pos = _decode_doc(payload, pos, seq_end)
                docs.append(doc)
            sequences[name] = docs
            offset = seq_end
        else:
            raise WireError(f"unknown OP_MSG section kind {kind}")
    if body is None:
        raise WireError("OP_MSG without a body section")
    return Message(request_id, OP_MSG, body, flags=flags, sequences=sequences)


def parse_op_query(request_id: int, payload: bytes) -> Message:
    """Decode a legacy OP_QUERY (only commands on `<db>.$cmd` are answered)."""
    if len(payload) < 4:
        raise WireError("OP_QUERY too short")
    (flags,) = _INT32.unpack_from(payload, 0)
    collection, offset = _cstring(payload, 4)
    offset += 8  # numberToSkip, numberToReturn
    query, _ = _decode_doc(payload, offset)
    return Message(request_id, OP_QUERY, query, flags=flags, collection=collection)


def encode_op_msg(request_id: int, response_to: int, doc: dict[str, Any], flags: int = 0) -> bytes:
    """An OP_MSG with a single body section."""
    body = struct.pack("<IB", flags, 0) + bson.encode(doc)
    return HEADER.pack(16 + len(body), request_id, response_to, OP_MSG) + body


def encode_op_reply(request_id: int, response_to: int, doc: dict[str, Any]) -> bytes:
    """An OP_REPLY holding one document, as answered to an OP_QUERY command."""
    body = struct.pack("<iqii", 0, 0, 0, 1) + bson.encode(doc)
    return HEADER.pack(16 + len(body), request_id, response_to, OP_REPLY) + body


def command_body(message: Message) -> dict[str, Any]:
    """The command document with any OP_MSG document sequences folded in."""
    if not message.sequences:
        return message.body
    body = dict(message.body)
    for name, docs in message.sequences.items():
        body[name] = docs
    return body


def database_of(message: Message) -> str:
    """The database a command addresses: `$db` for OP_MSG, the namespace for OP_QUERY.

    Empty when the client named none; the command layer answers that with an error.
    """
    if message.op_code == OP_QUERY:
        return message.collection.split(".", 1)[0]
    db = message.body.get("$db")
    return db if isinstance(db, str) else ""
