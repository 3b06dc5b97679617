"""Shard keys, as routers and shards both need them: a document's key under a collection's key
pattern, their order, whether a key falls in a range, and MongoDB's hash of a value for a
hashed key (`BSONElementHasher::hash64` with seed 0: an MD5 of the value's canonical type and
bytes, its first eight bytes read as a little-endian int64)."""

from __future__ import annotations

import datetime
import hashlib
import math
import re
import struct
from decimal import ROUND_HALF_EVEN
from typing import Any

from bson.binary import Binary
from bson.code import Code
from bson.dbref import DBRef
from bson.decimal128 import Decimal128
from bson.int64 import Int64
from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.objectid import ObjectId
from bson.regex import Regex
from bson.timestamp import Timestamp

from rsdrill_emulator.values import compare

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_MISSING = object()


def _canonical_type(value: Any) -> int:
    """MongoDB's canonicalizeBSONType: values of one canonical type compare and hash alike."""
    if isinstance(value, MinKey):
        return -1
    if isinstance(value, MaxKey):
        return 127
    if value is None:
        return 5
    if isinstance(value, bool):
        return 40
    if isinstance(value, int | float | Decimal128):
        return 10
    if isinstance(value, str):
        return 15
    if isinstance(value, DBRef):
        return 55
    if isinstance(value, dict):
        return 20
    if isinstance(value, list | tuple):
        return 25
    if isinstance(value, Binary | bytes):
        return 30
    if isinstance(value, ObjectId):
        return 35
    if isinstance(value, datetime.datetime):
        return 45
    if isinstance(value, Timestamp):
        return 47
    if isinstance(value, Regex | re.Pattern):
        return 50
    if isinstance(value, Code):
        return 65 if value.scope is not None else 60
    raise TypeError(f"cannot hash a {type(value).__name__}")


def _number_for_hash(value: int | float | Decimal128) -> int:
    """safeNumberLongForHash: doubles truncated (NaN 0, 2^63 itself INT64_MIN, clamped beyond),
    decimals rounded half-even and clamped."""
    if isinstance(value, Decimal128):
        d = value.to_decimal()
        if d.is_nan():
            return 0
        if d >= _INT64_MAX:
            return _INT64_MAX
        if d <= _INT64_MIN:
            return _INT64_MIN
        return int(d.to_integral_value(rounding=ROUND_HALF_EVEN))
    if isinstance(value, float):
        if math.isnan(value):
            return 0
        if value == 2.0**63:
            return _INT64_MIN
        if value >= 2.0**63:
            return _INT64_MAX
        if value < -(2.0**63):
            return _INT64_MIN
        return int(value)
    return int(value)


def _hash_into(md5: Any, value: Any, name: str | None) -> None:
    canonical = _canonical_type(value)
    md5.update(struct.pack("<i", canonical))
    if name is not None:
        md5.update(name.encode() + b"\0")
    if canonical == 10:
        md5.update(struct.pack("<q", _number_for_hash(value)))
    elif isinstance(value, dict | DBRef):
        items = value.as_doc().items() if isinstance(value, DBRef) else value.items()
        for key, child in items:
            _hash_into(md5, child, key)
        md5.update(struct.pack("<i", 0))
    elif isinstance(value, list | tuple):
        for i, child in enumerate(value):
            _hash_into(md5, child, str(i))
        md5.update(struct.pack("<i", 0))
    elif canonical in (-1, 5, 127):
        pass  # MinKey, null and MaxKey hash by their type alone
    else:
        md5.update(_value_bytes(value))


def _value_bytes(value: Any) -> bytes:
    """The value's bytes as a BSON element holds them (after its type and name)."""
    if isinstance(value, str):
        raw = value.encode()
        return struct.pack("<i", len(raw) + 1) + raw + b"\0"
    if isinstance(value, bool):
        return b"\1" if value else b"\0"
    if isinstance(value, ObjectId):
        return value.binary
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.UTC)
        millis = int(value.timestamp() * 1000)
        return struct.pack("<q", millis)
    if isinstance(value, Timestamp):
        return struct.pack("<II", value.inc, value.time)
    if isinstance(value, Binary | bytes):
        subtype = value.subtype if isinstance(value, Binary) else 0
        return struct.pack("<iB", len(value), subtype) + bytes(value)
    raise TypeError(f"cannot hash a {type(value).__name__}")


def hash64(value: Any) -> int:
    """MongoDB's hash of a value for a hashed shard key or index (`convertShardKeyToHashed`)."""
    md5 = hashlib.md5(usedforsecurity=False)
    md5.update(struct.pack("<i", 0))  # the seed
    _hash_into(md5, value, None)
    return int(struct.unpack("<q", md5.digest()[:8])[0])


def get_path(doc: dict[str, Any], path: str) -> Any:
    """The value at a dotted path, or `_MISSING` (arrays are not descended: a shard key may
    not be one)."""
    value: Any = doc
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return _MISSING
        value = value[part]
    return value


def key_value(pattern: dict[str, Any], field: str, value: Any) -> Any:
    """A field's key value: hashed for a hashed field (missing: null)."""
    if value is _MISSING:
        value = None
    return Int64(hash64(value)) if pattern[field] == "hashed" else value


def document_key(pattern: dict[str, Any], doc: dict[str, Any]) -> dict[str, Any]:
    """A document's shard key (its missing fields null, as mongos takes them)."""
    return {f: key_value(pattern, f, get_path(doc, f)) for f in pattern}


def equality_key(pattern: dict[str, Any], query: dict[str, Any]) -> dict[str, Any] | None:
    """The shard key a filter pins by equality on every key field, else None (the filter may
    match documents of several chunks)."""
    key: dict[str, Any] = {}
    for field in pattern:
        value = query.get(field, _MISSING)
        if isinstance(value, dict) and value and next(iter(value)).startswith("$"):
            if set(value) != {"$eq"}:
                return None
            value = value["$eq"]
        if value is _MISSING or isinstance(value, Regex | re.Pattern | list):
            return None
        key[field] = key_value(pattern, field, value)
    return key


def compare_keys(pattern: dict[str, Any], a: dict[str, Any], b: dict[str, Any]) -> int:
    """Shard key values in the pattern's field order (MinKey and MaxKey at the ends)."""
    for name in pattern:
        order = compare(a.get(name), b.get(name))
        if order:
            return order
    return 0


def in_range(pattern: dict[str, Any], key: dict[str, Any], low: dict[str, Any],
             high: dict[str, Any]) -> bool:  # fmt: skip
    """Whether `key` is in [low, high), as a chunk holds keys."""
    return compare_keys(pattern, low, key) <= 0 < compare_keys(pattern, high, key)
