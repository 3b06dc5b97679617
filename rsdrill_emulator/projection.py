"""MongoDB projection and sort on plain documents (find's `projection` and `sort`).

Pure, as `query`: arguments are never mutated and returned documents share nothing with them."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from functools import cmp_to_key
from typing import Any

from rsdrill_emulator.query import Document, _resolve
from rsdrill_emulator.values import (
    _BOOL,
    _BSON_KEY,
    _MISSING,
    _NUMBER,
    QueryError,
    _as_int,
    _bracket,
    _sign,
    _truthy,
    compare,
)

ProjectionTree = dict[str, Any]  # field name -> True (the whole field) or a nested tree


def project(doc: Mapping[str, Any], projection: Mapping[str, Any] | None) -> Document:
    """`doc` with an inclusion or exclusion `projection` applied (None or {} keeps it all)."""
    return _compile_projection(projection)(doc)


def _compile_projection(
    projection: Mapping[str, Any] | None,
) -> Callable[[Mapping[str, Any]], Document]:
    if not projection:
        return lambda doc: copy.deepcopy(dict(doc))
    keep_id = True
    fields: dict[str, bool] = {}
    for path, flag in projection.items():
        if not path or path.startswith("$") or ".$" in path:
            raise QueryError(2, f"unsupported projection path: '{path}'")
        if _bracket(flag) not in (_NUMBER, _BOOL):
            raise QueryError(2, f"unsupported projection value for '{path}': {flag!r}")
        if path == "_id":
            keep_id = _truthy(flag)
        else:
            fields[path] = _truthy(flag)
    inclusive = next(iter(fields.values()), keep_id)
    for path, included in fields.items():
        if included != inclusive:
            mode, kind = ("inclusion", "exclusion") if inclusive else ("exclusion", "inclusion")
            raise QueryError(2, f"Cannot do {kind} on field {path} in {mode} projection")
    if keep_id == inclusive:
        fields["_id"] = keep_id
    tree = _projection_tree(list(fields))
    if inclusive:
        return lambda doc: copy.deepcopy(_include(doc, tree))
    return lambda doc: copy.deepcopy(_exclude(doc, tree))


def _projection_tree(paths: list[str]) -> ProjectionTree:
    tree: ProjectionTree = {}
    for path in paths:
        *parents, last = path.split(".")
        node = tree
        for part in parents:
            node = node.setdefault(part, {})
            if node is True:
                raise QueryError(31250, f"Path collision at {path}")
        if last in node:
            raise QueryError(31250, f"Path collision at {path}")
        node[last] = True
    return tree


def _include(doc: Mapping[str, Any], tree: ProjectionTree) -> Document:
    """Only the fields in `tree`, in the document's own order."""
    result: Document = {}
    for key, value in doc.items():
        subtree = tree.get(key)
        if subtree is True:
            result[key] = value
        elif subtree is not None:
            kept = _include_nested(value, subtree)
            if kept is not _MISSING:
                result[key] = kept
    return result


def _include_nested(value: Any, tree: ProjectionTree) -> Any:
    # Scalars have no sub-fields to include; arrays keep only their (projected) documents.
    if isinstance(value, dict):
        return _include(value, tree)
    if isinstance(value, list):
        kept = (_include_nested(item, tree) for item in value)
        return [item for item in kept if item is not _MISSING]
    return _MISSING


def _exclude(value: Any, tree: ProjectionTree) -> Any:
    """`value` without the fields in `tree`, applied to each element of arrays."""
    if isinstance(value, list):
        return [_exclude(item, tree) for item in value]
    if not isinstance(value, dict):
        return value
    result: Document = {}
    for key, item in value.items():
        subtree = tree.get(key)
        if subtree is not True:
            result[key] = item if subtree is None else _exclude(item, subtree)
    return result


def sort_documents(docs: Iterable[Document], sort_spec: Mapping[str, Any]) -> list[Document]:
    """`docs` stably sorted by `sort_spec` ({path: 1 | -1}); the documents are not copied."""
    fields = _parse_sort(sort_spec)
    keyed = [
        ([_sort_key(doc, parts, direction < 0) for parts, direction in fields], doc) for doc in docs
    ]

    def order(left: tuple[list[Any], Any], right: tuple[list[Any], Any]) -> int:
        for key_a, key_b, (_, direction) in zip(left[0], right[0], fields, strict=True):
            result = _sign(key_a[0], key_b[0]) or compare(key_a[1], key_b[1])
            if result:
                return result * direction
        return 0

    keyed.sort(key=cmp_to_key(order))
    return [doc for _, doc in keyed]


def _parse_sort(sort_spec: Mapping[str, Any]) -> list[tuple[list[str], int]]:
    if not isinstance(sort_spec, Mapping):
        raise QueryError(2, "sort specification must be an object")
    fields = []
    for path, value in sort_spec.items():
        direction = _as_int(value)
        if direction not in (1, -1):
            raise QueryError(
                2, "$sort key ordering must be 1 (for ascending) or -1 (for descending)"
            )
        fields.append((path.split("."), direction))
    return fields


def _sort_key(doc: Mapping[str, Any], parts: list[str], descending: bool) -> tuple[int, Any]:
    """(rank, value): arrays sort by their least (or, descending, greatest) element and a
    missing field as null; an empty array sorts before null (rank 0), as in MongoDB."""
    values = [
        item
        for found in _resolve(doc, parts)
        for item in (found if isinstance(found, list) else [found])
    ]
    if not values:
        return (0, None)
    return (1, (max if descending else min)(values, key=_BSON_KEY))
