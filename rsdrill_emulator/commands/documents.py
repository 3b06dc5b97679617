"""What reads and writes share: the documents a filter matches, views refused as a write's
target, unique keys checked."""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from rsdrill_emulator import (
    pipeline,
    query,
    values,
)
from rsdrill_emulator.datastore import id_key
from rsdrill_emulator.errors import (
    CommandError,
)
from rsdrill_emulator.node import Node
from rsdrill_emulator.projection import sort_documents

OWNED: ContextVar[tuple[str, Callable[[dict[str, Any]], bool]] | None] = ContextVar(
    "owned", default=None
)
"""For a router's versioned command on a sharded collection: the collection, and whether a
document of it is one this shard owns (commands/shardversion.py); the others are orphans it
neither reads nor writes. Set for the request only (`Commands.run`)."""


def _matching(
    node: Node,
    ns: str,
    filt: dict[str, Any],
    variables: dict[str, Any] | None = None,
    collation: Any = None,
    sort: Any = None,
) -> list[dict[str, Any]]:
    """Documents matching a filter (then sorted by `sort`), compared under `collation`; an
    `_id` equality looks the document up instead of scanning. `variables`: the command's
    `let`, for `$expr`."""
    with values.collation(collation):
        found = _scan(node, ns, query.compile_filter(filt, variables), filt)
        return sort_documents(found, sort) if sort else found


def _collection(node: Node, ns: str) -> list[dict[str, Any]]:
    """A collection's documents, or what a view's pipeline makes of its source's."""
    view = node.store.view(ns)
    if view is None:
        return _owned(ns, node.store.documents(ns))
    source = f"{ns.split('.', 1)[0]}.{view['viewOn']}"
    return pipeline.run_pipeline(_collection(node, source), view["pipeline"])


def _scan(
    node: Node, ns: str, predicate: query.Predicate, filt: dict[str, Any]
) -> list[dict[str, Any]]:
    if node.store.view(ns) is not None:
        return [d for d in _collection(node, ns) if predicate(d)]
    doc_id = filt.get("_id")
    if "_id" in filt and not isinstance(doc_id, dict | list):
        found = node.store.get(ns, doc_id)
        return _owned(ns, [found] if found is not None and predicate(found) else [])
    return _owned(ns, [d for d in node.store.documents(ns) if predicate(d)])


def _owned(ns: str, docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    owned = OWNED.get()
    if owned is None or owned[0] != ns:
        return docs
    return [d for d in docs if owned[1](d)]


def _refuse_view(node: Node, ns: str) -> None:
    if node.store.view(ns) is not None:
        raise CommandError(166, f"Namespace {ns} is a view, not a collection")


def _check_unique(node: Node, ns: str, doc: dict[str, Any]) -> None:
    """DuplicateKey (a QueryError) if writing `doc` would break one of the unique indexes."""
    for keys in node.store.unique_keys(ns):
        if (error := keys.clash(doc, id_key(doc["_id"]))) is not None:
            raise error
