"""A sharded cluster's parts by name: the config servers' replica set, each shard's, and the
routers. Selection, guards, probes and the analysis read a sharded target through it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


def member_count(topology: str) -> int:
    """How many members a replica-set topology of the sandbox has."""
    return {"rs1": 1, "standalone": 1, "rs5": 5}.get(topology, 3)


CONFIG = "config"
"""The config servers' set, as `sets()` names it (the set's own name differs per cluster)."""


@dataclass(frozen=True)
class ShardedLayout:
    config: tuple[str, ...]
    shards: dict[str, tuple[str, ...]]
    routers: tuple[str, ...]

    def sets(self) -> dict[str, tuple[str, ...]]:
        """Every replica set's members by name, the config servers' first."""
        return {CONFIG: self.config, **self.shards}

    def members(self) -> list[str]:
        """Every replica-set member (routers are none), in `sets()` order."""
        return [host for hosts in self.sets().values() for host in hosts]

    def set_of(self, host: str) -> str | None:
        """The name of the set `host` is a member of (None: a router, or not in the cluster)."""
        return next((name for name, hosts in self.sets().items() if host in hosts), None)


def same_set(members: Sequence[str], layout: ShardedLayout | None, host: str) -> list[str]:
    """The members of `host`'s replica set: of a sharded target its own set's (the other sets'
    members and the routers reach it as clients do), else every member."""
    name = layout.set_of(host) if layout is not None else None
    return list(layout.sets()[name]) if layout is not None and name is not None else list(members)
