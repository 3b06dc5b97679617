"""Secondary indexes as far as a client can tell them apart: their specifications (createIndexes,
listIndexes, dropIndexes) and unique constraints (DuplicateKey with `keyPattern`/`keyValue`).

The sandbox does not use indexes to answer queries (it scans); an index is its specification,
and a unique one also keeps its keys (`UniqueKeys`, built by the data store from the collection
when first needed) so a write's clash is found without a scan.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import bson
from bson.decimal128 import Decimal128

from rsdrill_emulator.query import _resolve, compile_filter
from rsdrill_emulator.values import _MISSING, QueryError

ID_INDEX: dict[str, Any] = {"v": 2, "key": {"_id": 1}, "name": "_id_"}
# Options createIndexes accepts besides key and name (what a client sends; all are kept).
_OPTIONS = frozenset(
    {"v", "unique", "sparse", "partialFilterExpression", "expireAfterSeconds", "hidden",
     "collation", "background", "weights", "default_language", "language_override",
     "textIndexVersion", "2dsphereIndexVersion", "bits", "min", "max", "wildcardProjection",
     "storageEngine", "clustered"}
)  # fmt: skip
_KINDS = frozenset({"text", "2d", "2dsphere", "hashed"})


def default_name(key: Mapping[str, Any]) -> str:
    """MongoDB's generated index name: `a_1_b_-1`."""
    return "_".join(f"{field}_{direction}" for field, direction in key.items())


def parse_spec(spec: Any) -> dict[str, Any]:
    """One createIndexes specification, checked, as listIndexes will show it."""
    if not isinstance(spec, Mapping):
        raise QueryError(14, "an index specification must be an object")
    key, name = spec.get("key"), spec.get("name")
    if not isinstance(key, Mapping) or not key:
        raise QueryError(67, "The index specification must contain a non-empty 'key' object")
    for field, direction in key.items():
        number = isinstance(direction, int | float) and not isinstance(direction, bool)
        if not field or not ((number and direction != 0) or direction in _KINDS):
            raise QueryError(
                67, f"Values in the index key pattern must be non-zero numbers or an index "
                f"type name, not {direction!r} for '{field}'"
            )  # fmt: skip
    if not isinstance(name, str) or not name:
        raise QueryError(9, "The 'name' field is a required property of an index specification")
    unknown = set(spec) - _OPTIONS - {"key", "name", "ns"}
    if unknown:
        raise QueryError(197, f"The field '{sorted(unknown)[0]}' is not valid for an index "
                              "specification")  # fmt: skip
    if "partialFilterExpression" in spec:
        compile_filter(spec["partialFilterExpression"])
    shown = {"v": 2, "key": dict(key), "name": name}
    shown.update((k, v) for k, v in spec.items() if k not in ("v", "key", "name", "ns"))
    return shown


def same_index(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two specifications describe the same index (createIndexes is then a no-op)."""
    options = ("unique", "sparse", "partialFilterExpression", "collation")
    return dict(a["key"]) == dict(b["key"]) and all(
        bool(a.get(o)) == bool(b.get(o)) if o in ("unique", "sparse") else a.get(o) == b.get(o)
        for o in options
    )


def key_value(index: Mapping[str, Any], doc: Mapping[str, Any]) -> dict[str, Any] | None:
    """The index key of `doc` as DuplicateKey shows it (`{field: value}`, a missing field as
    null), or None when the index does not hold the document (sparse, partial)."""
    values: dict[str, Any] = {}
    for field in index["key"]:
        found = _resolve(doc, field.split("."))
        value = found[0] if len(found) == 1 else found
        values[field] = None if value is _MISSING else value
    if index.get("sparse") and all(
        _resolve(doc, field.split(".")) == [_MISSING] for field in index["key"]
    ):
        return None
    partial = index.get("partialFilterExpression")
    if partial is not None and not compile_filter(partial)(doc):
        return None
    return values


def duplicate_key_error(ns: str, index: Mapping[str, Any], key: dict[str, Any]) -> QueryError:
    """mongod's DuplicateKey (11000), with the index's key pattern and the offending key."""
    shown = ", ".join(f"{field}: {value!r}" for field, value in key.items())
    return QueryError(
        11000,
        f"E11000 duplicate key error collection: {ns} index: {index['name']} "
        f"dup key: {{ {shown} }}",
        details={"keyPattern": dict(index["key"]), "keyValue": key},
    )


def _canonical(value: Any) -> Any:
    """`value` with every number as a float: equal keys (1, 1.0, Int64(1)) encode alike."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, Decimal128):
        return float(value.to_decimal())
    if isinstance(value, dict):
        return {key: _canonical(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_canonical(item) for item in value]
    return value


def _encoded(key: dict[str, Any]) -> bytes:
    return bson.encode({"k": [_canonical(value) for value in key.values()]})


class UniqueKeys:
    """The keys a unique index holds, each with the document (by its stored `_id` key) that
    has it: a write's clash is one lookup instead of a scan."""

    def __init__(self, ns: str, index: Mapping[str, Any]) -> None:
        self.ns = ns
        self.index = index
        self._owner: dict[bytes, bytes] = {}  # encoded key -> document
        self._key_of: dict[bytes, bytes] = {}  # document -> encoded key

    def clash(self, doc: Mapping[str, Any], doc_key: bytes) -> QueryError | None:
        """DuplicateKey if another document holds `doc`'s key."""
        key = key_value(self.index, doc)
        if key is None:
            return None
        owner = self._owner.get(_encoded(key))
        if owner is None or owner == doc_key:
            return None
        return duplicate_key_error(self.ns, self.index, key)

    def add(self, doc: Mapping[str, Any], doc_key: bytes) -> None:
        self.remove(doc_key)
        key = key_value(self.index, doc)
        if key is not None:
            encoded = _encoded(key)
            self._owner[encoded] = doc_key
            self._key_of[doc_key] = encoded

    def remove(self, doc_key: bytes) -> None:
        encoded = self._key_of.pop(doc_key, None)
        if encoded is not None and self._owner.get(encoded) == doc_key:
            del self._owner[encoded]


def build_check(
    ns: str,
    index: Mapping[str, Any],
    docs: Iterable[Mapping[str, Any]],
    doc_key: Callable[[Any], bytes],
) -> None:
    """Building a unique index over existing documents fails on the first duplicate."""
    if not index.get("unique"):
        return
    keys = UniqueKeys(ns, index)
    for doc in docs:
        stored = doc_key(doc["_id"])
        error = keys.clash(doc, stored)
        if error is not None:
            raise error
        keys.add(doc, stored)
