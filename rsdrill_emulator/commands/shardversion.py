"""A shard member's check of the shard version a router attaches to a versioned command, as
mongod's does: the router's idea of the collection (unsharded, or sharded at some version)
must be the shard's, else the command fails with StaleConfig before it does anything, and the
router refreshes its routing table and tries again.

The shard's own idea is `config.cache.collections` on its replica set (written, w:majority,
by the router that shards a collection or moves a chunk, as mongod's filtering metadata is
persisted there), so it holds on every member and across restarts. A command without
`shardVersion` (a client connected to the shard directly) is not checked, as on mongod.

A versioned command on a sharded collection sees only the documents whose key is in a range
the shard owns (`owned`): a copy a migration left behind, or one not committed yet, is an
orphan no router's reader or writer may meet (MongoDB 6.0+ filters orphans for writes too).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bson.objectid import ObjectId
from bson.timestamp import Timestamp

from rsdrill_emulator.commands.base import _ns
from rsdrill_emulator.errors import CommandError
from rsdrill_emulator.request import Request
from rsdrill_emulator.shardkey import document_key, in_range

CACHE_NS = "config.cache.collections"
STALE_CONFIG = 13388
UNSHARDED: dict[str, Any] = {"e": ObjectId(bytes(12)), "t": Timestamp(0, 0), "v": Timestamp(0, 0)}
"""The version a router sends for a collection it takes to be unsharded."""
_VERSIONED = frozenset(
    {"insert", "update", "delete", "find", "findandmodify", "aggregate", "count", "distinct"}
)


def _version_of(cached: dict[str, Any] | None) -> dict[str, Any]:
    if cached is None:
        return UNSHARDED
    return {"e": cached["epoch"], "t": cached["timestamp"], "v": cached["version"]}


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return all(a.get(k) == b.get(k) for k in ("e", "t", "v"))


def versioned(req: Request) -> bool:
    """A command on one collection that carries the router's shard version."""
    return (
        req.name.lower() in _VERSIONED
        and isinstance(req.body.get(req.name), str)
        and isinstance(req.body.get("shardVersion"), dict)
    )


def stale_config(req: Request, cached: dict[str, Any] | None, shard: str) -> CommandError | None:
    """StaleConfig when a versioned request's shard version is not the shard's for its
    namespace (`cached`: the namespace's config.cache.collections document, None if
    unsharded)."""
    received = req.body["shardVersion"]
    wanted = _version_of(cached)
    if _same(received, wanted) and not in_critical_section(cached):
        return None
    ns = _ns(req)
    return CommandError(STALE_CONFIG, f"version mismatch detected for {ns}",
                        info={"ns": ns, "vReceived": received, "vWanted": wanted,
                              "shardId": shard})  # fmt: skip


def in_critical_section(cached: dict[str, Any] | None) -> bool:
    """A migration of the collection is committing: its versioned commands wait (up to
    CRITICAL_SECTION_WAIT_S), then answer StaleConfig, as mongod's do."""
    return bool(cached and cached.get("criticalSection"))


CRITICAL_SECTION_WAIT_S = 15.0


def owned(cached: dict[str, Any] | None) -> Callable[[dict[str, Any]], bool] | None:
    """Whether a document belongs to this shard by the ranges it owns (None: unsharded,
    every document does)."""
    if cached is None:
        return None
    key, ranges = cached["key"], cached.get("ranges", [])

    def belongs(doc: dict[str, Any]) -> bool:
        value = document_key(key, doc)
        return any(in_range(key, value, r["min"], r["max"]) for r in ranges)

    return belongs
