"""The routing table a router caches from the config servers: each database's primary shard,
each sharded collection's key pattern and chunks (ranges of key values, each owned by one
shard, with its version), as `config.databases`, `config.collections` and `config.chunks`
hold them."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

from bson.max_key import MaxKey
from bson.min_key import MinKey
from bson.objectid import ObjectId
from bson.timestamp import Timestamp

from rsdrill_emulator.shardkey import compare_keys, document_key, equality_key, in_range


@dataclass(frozen=True)
class Chunk:
    min: dict[str, Any]
    max: dict[str, Any]
    shard: str
    lastmod: Timestamp

    def to_doc(self, uuid: Any) -> dict[str, Any]:
        return {"uuid": uuid, "min": self.min, "max": self.max, "shard": self.shard,
                "lastmod": self.lastmod}  # fmt: skip


@dataclass
class CollectionRoute:
    """A sharded collection: its key pattern, uuid and chunks sorted by their lower bound."""

    ns: str
    key: dict[str, Any]
    uuid: Any
    unique: bool = False
    epoch: ObjectId = field(default_factory=lambda: ObjectId(bytes(12)))
    timestamp: Timestamp = field(default_factory=lambda: Timestamp(0, 0))
    chunks: list[Chunk] = field(default_factory=list)
    # The balancer leaves it alone (config.collections noBalance).
    no_balance: bool = False

    def sort_chunks(self) -> None:
        def by_lower_bound(a: Chunk, b: Chunk) -> int:
            return compare_keys(self.key, a.min, b.min)

        self.chunks.sort(key=functools.cmp_to_key(by_lower_bound))

    @property
    def hashed(self) -> bool:
        return "hashed" in self.key.values()

    @property
    def version(self) -> Timestamp:
        """The collection's version: its newest chunk's."""
        return max((c.lastmod for c in self.chunks), default=Timestamp(0, 0))

    def shard_version(self) -> dict[str, Any]:
        """What a router attaches to a command on this collection (`shardVersion`): its
        epoch and timestamp, and its version (the newest chunk's), which a shard must hold
        too (commands/shardversion.py)."""
        return {"e": self.epoch, "t": self.timestamp, "v": self.version}

    def cache_document(self, shard: str) -> dict[str, Any]:
        """A shard's own record of this version (`config.cache.collections`), with the key
        ranges it owns: it filters out documents outside them (orphans)."""
        ranges = [{"min": c.min, "max": c.max} for c in self.chunks if c.shard == shard]
        return {"_id": self.ns, "epoch": self.epoch, "timestamp": self.timestamp,
                "version": self.version, "key": self.key, "ranges": ranges}  # fmt: skip

    def shards(self) -> list[str]:
        """The shards that own a chunk, each once, in chunk order."""
        return list(dict.fromkeys(c.shard for c in self.chunks))

    def owner(self, key: dict[str, Any]) -> str:
        """The shard owning the chunk whose range holds `key` (min inclusive, max exclusive)."""
        for chunk in self.chunks:
            if in_range(self.key, key, chunk.min, chunk.max):
                return chunk.shard
        raise LookupError(f"{self.ns}: no chunk holds {key}")

    def shard_of_document(self, doc: dict[str, Any]) -> str:
        return self.owner(document_key(self.key, doc))

    def shards_for_filter(self, query: dict[str, Any]) -> list[str]:
        """One shard when the filter pins the whole key by equality, else every owning shard."""
        key = equality_key(self.key, query)
        return [self.owner(key)] if key is not None else self.shards()


@dataclass
class RoutingTable:
    """What the router knows of the cluster's metadata, and how fresh it is."""

    databases: dict[str, str] = field(default_factory=dict)
    collections: dict[str, CollectionRoute] = field(default_factory=dict)
    shards: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def from_config(
        cls,
        shards: list[dict[str, Any]],
        databases: list[dict[str, Any]],
        collections: list[dict[str, Any]],
        chunks: list[dict[str, Any]],
    ) -> RoutingTable:
        table = cls()
        for shard in shards:
            hosts = str(shard["host"]).partition("/")[2]
            table.shards[shard["_id"]] = hosts.split(",")
        for db in databases:
            table.databases[db["_id"]] = db["primary"]
        by_uuid: dict[Any, CollectionRoute] = {}
        for coll in collections:
            if coll.get("dropped"):
                continue
            route = CollectionRoute(
                coll["_id"],
                dict(coll["key"]),
                coll["uuid"],
                bool(coll.get("unique")),
                coll["lastmodEpoch"],
                coll["timestamp"],
                no_balance=bool(coll.get("noBalance")),
            )
            table.collections[route.ns] = route
            by_uuid[route.uuid] = route
        for doc in chunks:
            owner = by_uuid.get(doc["uuid"])
            if owner is not None:
                owner.chunks.append(Chunk(dict(doc["min"]), dict(doc["max"]), doc["shard"],
                                          doc["lastmod"]))  # fmt: skip
        for route in table.collections.values():
            route.sort_chunks()

        return table


def whole_range(pattern: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The lowest and highest key values: the one chunk of a new ranged collection spans them."""
    return ({f: MinKey() for f in pattern}, {f: MaxKey() for f in pattern})
