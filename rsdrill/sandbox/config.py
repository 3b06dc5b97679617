"""The sandbox replica set's configuration, shared by the launcher and every member process.

Written once by `rsdrill sandbox up` to `<dir>/replset.json`; each member process reads it at
start. Defaults equal MongoDB's own (replSetGetConfig `settings`).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from rsdrill.domains import STANDALONE_ZONES, spread
from rsdrill.layout import member_count

TOPOLOGIES = ("rs1", "rs3", "rs5", "psa", "standalone")
# A member's storage: on disk (kept across a restart), or in memory (gone with the process,
# as with mongod's inMemory engine; standalone only).
STORAGE = ("disk", "memory")
# How members answer the drivers' handshake: `hello`, or only the legacy `isMaster` (servers
# before 4.4.2, and some compatible servers; these claim version 4.4.1).
HANDSHAKES = ("hello", "legacy")
CONFIG_FILE = "replset.json"

UNSAFE_MAJORITY_ACK_ENV = "RSDRILL_TEST_UNSAFE_MAJORITY_ACK"
"""Test-only: set to 1 in the environment members start with, they acknowledge w:majority once
the write is durable on the primary alone, before any secondary has it: a deliberately broken
server, which `rsdrill soak` must catch (such writes are lost when that primary fails)."""
UNSAFE_SNAPSHOT_ENV = "RSDRILL_TEST_UNSAFE_SNAPSHOT"
"""Test-only: set to 1 in the environment members start with, each statement of a transaction
reads the newest data instead of the transaction's snapshot: a deliberately broken server whose
read skew the transactional checker (analysis/elle.py) must find."""
SKIP_OPLOG_ENTRY_ENV = "RSDRILL_TEST_SKIP_OPLOG_ENTRY"
"""Test-only: set to N in the environment members start with, each member's process leaves the
Nth insert it applies as a secondary out of its data (the entry is in its oplog): a deliberately
broken server whose divergence the data audit must find."""
IGNORE_AFTER_CLUSTER_TIME_ENV = "RSDRILL_TEST_IGNORE_AFTER_CLUSTER_TIME"
"""Test-only: set to 1 in the environment members start with, a read does not wait until the
member has applied its causal session's afterClusterTime: a deliberately broken server whose
stale reads the causal checker (analysis/causal.py) must find."""
NO_ROLLBACK_FILES_ENV = "RSDRILL_TEST_NO_ROLLBACK_FILES"
"""Test-only: set to 1 in the environment members start with, a rollback undoes its writes
without saving them to rollback files: a deliberately broken server whose losses the audit's
rollback accounting cannot account for, which the soak must find."""
PLANTED_ENVS = (UNSAFE_MAJORITY_ACK_ENV, UNSAFE_SNAPSHOT_ENV, SKIP_OPLOG_ENTRY_ENV,
                IGNORE_AFTER_CLUSTER_TIME_ENV, NO_ROLLBACK_FILES_ENV)  # fmt: skip
"""Every test-only switch that breaks the emulator on purpose (a real mongod ignores them)."""


@dataclass(frozen=True)
class MemberSpec:
    """One member as in a replica-set config document."""

    id: int
    host: str
    priority: float = 1.0
    votes: int = 1
    arbiter_only: bool = False
    # The failure domain it lives in: its replica-set tag `zone` (as members[].tags holds it).
    zone: str | None = None
    # Its other replica-set tags, as (name, value) pairs (a reconfig may give any).
    other_tags: tuple[tuple[str, str], ...] = ()

    @property
    def tags(self) -> dict[str, str]:
        zone = {} if self.zone is None else {"zone": self.zone}
        return {**dict(self.other_tags), **zone}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> MemberSpec:
        """From its JSON form (`asdict`)."""
        return cls(**{**raw, "other_tags": tuple(tuple(t) for t in raw.get("other_tags", ()))})

    @property
    def port(self) -> int:
        return int(self.host.rsplit(":", 1)[1])


@dataclass(frozen=True)
class Settings:
    """Replica-set settings; names and defaults follow MongoDB's replSetGetConfig."""

    heartbeat_interval_ms: int = 2000
    election_timeout_ms: int = 10_000
    heartbeat_timeout_s: int = 10
    catch_up_timeout_ms: int = -1
    chaining_allowed: bool = True


@dataclass(frozen=True)
class ReplSetSpec:
    """Everything a member process needs to know about its set."""

    set_name: str
    topology: str
    members: tuple[MemberSpec, ...]
    settings: Settings = field(default_factory=Settings)
    oplog_size_bytes: int = 192 * 1024 * 1024
    # Emulates a slower network during initial sync; None means as fast as loopback allows.
    initial_sync_bytes_per_s: int | None = None
    # Milliseconds between group commits of the journal (MongoDB: 100 ms).
    journal_commit_interval_ms: int = 100
    # Each member's page cache (its working set in memory, as WiredTiger's cache); None: the
    # emulator's default, 64 MiB.
    cache_bytes: int | None = None
    storage: str = "disk"
    handshake: str = "hello"
    # Members listen with TLS only (certificates under tls/ of the sandbox directory).
    tls: bool = False
    # Clients log in with their TLS certificate (MONGODB-X509), members with theirs.
    x509: bool = False
    # MONGODB-AWS logins are checked by forwarding the client's signed request here (STS).
    aws_sts_url: str | None = None

    @property
    def standalone(self) -> bool:
        """One mongod without a replica set: no setName in hello, replSet* commands refused."""
        return self.topology == "standalone"

    def member(self, host: str) -> MemberSpec:
        for m in self.members:
            if m.host == host:
                return m
        raise KeyError(f"{host} is not a member of replica set {self.set_name}")

    # Cached (the spec is frozen; a reconfig makes a new one): a primary counts them per write.
    @cached_property
    def voting(self) -> tuple[MemberSpec, ...]:
        return tuple(m for m in self.members if m.votes > 0)

    @cached_property
    def data_bearing(self) -> tuple[MemberSpec, ...]:
        return tuple(m for m in self.members if not m.arbiter_only)

    @cached_property
    def majority(self) -> int:
        """Votes needed to elect a primary."""
        return len(self.voting) // 2 + 1

    @cached_property
    def write_majority(self) -> int:
        """Members that must have a write for w:majority (MongoDB's writeMajorityCount)."""
        data_voting = sum(1 for m in self.voting if not m.arbiter_only)
        return min(self.majority, data_voting)

    @cached_property
    def implicit_default_w(self) -> int | str:
        """MongoDB 5.0+: w:majority unless arbiters leave no data-bearing voting majority."""
        arbiters = sum(1 for m in self.members if m.arbiter_only)
        data_voting = sum(1 for m in self.voting if not m.arbiter_only)
        if arbiters > 0 and data_voting <= self.majority:
            return 1
        return "majority"

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> ReplSetSpec:
        raw = json.loads(text)
        raw["members"] = tuple(MemberSpec.from_dict(m) for m in raw["members"])
        raw["settings"] = Settings(**raw["settings"])
        return cls(**raw)

    def write(self, directory: Path) -> Path:
        path = directory / CONFIG_FILE
        path.write_text(self.to_json())
        return path

    @classmethod
    def read(cls, directory: Path) -> ReplSetSpec:
        return cls.from_json((directory / CONFIG_FILE).read_text())


def build_topology(
    topology: str,
    *,
    port_base: int,
    set_name: str = "rs0",
    host: str = "127.0.0.1",
    settings: Settings | None = None,
    **options: Any,
) -> ReplSetSpec:
    """rs1: one data member; rs3: three data members; rs5: five (for partition shapes, e.g.
    a ring); psa: primary, secondary, arbiter; standalone: one server without a replica set."""
    if topology not in TOPOLOGIES:
        raise ValueError(f"unknown topology {topology!r}; choose one of {', '.join(TOPOLOGIES)}")
    if options.get("storage", "disk") not in STORAGE:
        raise ValueError(f"unknown storage {options['storage']!r}; choose disk or memory")
    if options.get("storage") == "memory" and topology != "standalone":
        raise ValueError("in-memory storage is for a standalone server (--topology standalone)")
    if options.get("handshake", "hello") not in HANDSHAKES:
        raise ValueError(f"unknown handshake {options['handshake']!r}; choose hello or legacy")
    if options.get("x509") and not options.get("tls"):
        raise ValueError("x.509 logins need TLS: add --tls (in an experiment, tls: true)")
    if options.get("aws_sts_url") and not str(options["aws_sts_url"]).startswith(
        ("http://", "https://")
    ):
        raise ValueError(f"the STS endpoint {options['aws_sts_url']} must be an http(s) URL")
    count = member_count(topology)
    zones = spread(options.pop("zones", None) or (), count)
    priorities = tuple(options.pop("priorities", None) or ())
    if priorities and len(priorities) != count:
        raise ValueError(f"{len(priorities)} priorities for {count} member(s)")
    if zones and topology == "standalone":
        raise ValueError(STANDALONE_ZONES)
    members = tuple(
        MemberSpec(
            id=i,
            host=f"{host}:{port_base + i}",
            priority=priorities[i] if priorities else 0.0 if topology == "psa" and i == 2 else 1.0,
            arbiter_only=topology == "psa" and i == 2,
            zone=zones[i] if zones else None,
        )
        for i in range(count)
    )
    return ReplSetSpec(
        set_name=set_name,
        topology=topology,
        members=members,
        settings=settings or Settings(),
        **options,
    )


EVENTS_FILE = "events.jsonl"
"""A member's own account of what happened to it, in its directory (rsdrill/sandbox/groundtruth.py
reads it): JSON lines `{"t_mono", "t_wall", "member", "event", ...}`."""
DATA_FILE = "member.sqlite"
"""An emulated member's data, in its `data/` directory (SQLite; a physical backup copies it)."""


def member_dir(sandbox_dir: Path, member: MemberSpec) -> Path:
    """Where one member keeps its data (`data/`), events (`events.jsonl`) and log."""
    return sandbox_dir / "members" / str(member.port)


def empty_dir(directory: Path) -> None:
    """Remove everything inside `directory`, which stays (it may be a mount point)."""
    for child in directory.iterdir() if directory.is_dir() else ():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


CLUSTER_FILE = "sharded.json"
"""A sharded sandbox's layout, at the top of its directory (`ClusterSpec`)."""
CONFIG_SET = "configRS"
"""The config server replica set's name (and its directory's)."""


@dataclass(frozen=True)
class ClusterSpec:
    """A sharded cluster in one directory: the config server replica set and each shard are
    sandboxes of their own in subdirectories named after their sets (`configRS/`, `shard0/`,
    …), the routers' own directories under `routers/<port>/`."""

    shards: tuple[str, ...]
    routers: tuple[str, ...]
    balancer: bool = True

    @property
    def sets(self) -> tuple[str, ...]:
        """Every replica set's name, the config servers' first."""
        return (CONFIG_SET, *self.shards)

    def set_dir(self, directory: Path, name: str) -> Path:
        return directory / name

    def set_spec(self, directory: Path, name: str) -> ReplSetSpec:
        return ReplSetSpec.read(self.set_dir(directory, name))

    def router_dir(self, directory: Path, host: str) -> Path:
        return directory / "routers" / host.rsplit(":", 1)[1]

    def write(self, directory: Path) -> Path:
        path = directory / CLUSTER_FILE
        path.write_text(json.dumps(asdict(self), indent=2))
        return path

    @classmethod
    def read(cls, directory: Path) -> ClusterSpec:
        raw = json.loads((directory / CLUSTER_FILE).read_text())
        return cls(tuple(raw["shards"]), tuple(raw["routers"]), bool(raw.get("balancer", True)))
