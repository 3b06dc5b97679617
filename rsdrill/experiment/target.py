"""An experiment's `target:`: where the replica set (or sharded cluster) is, and how rsdrill
reaches or builds it. Each registered platform adds its own `target.<name>` section."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Literal, TypeVar

from pydantic import BaseModel, Field, create_model, model_validator

from rsdrill.domains import STANDALONE_ZONES, spread
from rsdrill.experiment.catalog import described
from rsdrill.fields import Duration, FieldProblem, Strict
from rsdrill.layout import member_count
from rsdrill.registry import member_source

# The platforms come from the registry (entry points): the model is built with one
# `target.<name>` and one `faults[i].<name>` section per platform that has one.
PLATFORM_NAMES: tuple[str, ...] = tuple(described())
PlatformName = Literal[PLATFORM_NAMES]  # type: ignore[valid-type]  # names known at run time


class LocalMember(Strict):
    """A member running on this machine that rsdrill may kill, freeze and restart."""

    host: str = Field(pattern=r"^[^:\s]+:\d+$", description="host:port the member listens on")
    start: str = Field(description="the shell command that starts the member (used to restart)")
    dbpath: str | None = Field(
        None,
        description="its data directory (volume: wipe empties it; disk-fill fills it, so it "
        "must be a filesystem of its own: a tmpfs, loop device or volume mounted there)",
    )
    faultfs: str | None = Field(
        None,
        description="the faultfs mount over its dbpath (`rsdrill faultfs mount`): needed for "
        "disk-fault, iops-throttle, volume-detach and power_loss",
    )


Options = TypeVar("Options", bound=BaseModel)


_SCHEMES = ("mongodb://", "mongodb+srv://")
_BAD_HOSTS = ("its hosts are not host[:port],... with ports 1-65535 (a user and password in it "
              "need %-escaping, as urllib.parse.quote_plus does)")  # fmt: skip


def _uri_problem(uri: str) -> str | None:
    """What is wrong with a connection string's form, read as pymongo reads it: its scheme,
    hosts and ports. Offline and without pymongo (validate imports no driver): an option, an
    SRV name and the TLS files are `check`'s. validate and plan once said `ok` to a malformed
    string, and run refused it unlocated. The string is never quoted: it may hold a password."""
    scheme = next((s for s in _SCHEMES if uri.startswith(s)), None)
    if scheme is None:
        return f"a connection string begins with {' or '.join(_SCHEMES)}"
    hosts = uri[len(scheme) :].partition("?")[0].partition("/")[0].rpartition("@")[2]
    entries = hosts.split(",")
    if scheme == "mongodb+srv://":
        one_name = len(entries) == 1 and re.fullmatch(r"[^:\[\]]+", hosts)
        return None if one_name else "a mongodb+srv:// URI names one host, without a port"
    for entry in entries:
        if entry.endswith(".sock"):  # a Unix socket's path, %-escaped
            continue
        found = re.fullmatch(r"(\[[^\]]+\]|[^:\[\]]+)(?::(\d+))?", entry)
        if found is None or (found.group(2) and not 0 < int(found.group(2)) <= 65535):
            return _BAD_HOSTS
    return None


class _Target(Strict):
    """Where the replica set is: a sandbox rsdrill builds, processes already running here, or
    a set on Kubernetes, EC2 or vSphere."""

    platform: PlatformName = Field(
        description="sandbox: rsdrill starts a replica set for the run; "
        "local: existing member processes on this machine; "
        "kubernetes, ec2, vsphere: a set on that platform (needs `uri` and its section)"
    )
    topology: Literal["rs1", "rs3", "rs5", "psa", "standalone", "sharded"] = Field(
        "rs3",
        description="sandbox builds it (rs5: five data-bearing members, for zones of 2-2-1 "
        "and partition shapes); elsewhere it is checked (a standalone server, one "
        "mongod without a replica set, is found as such for rs1 too); sharded: config "
        "servers, `shards` replica sets and `mongos` routers (sandbox builds them; elsewhere "
        "`uri` names the routers and the rest is found from them)",
    )
    cluster: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        description="the cluster's name in the history and the fleet view (default: the "
        "replica set's name and its members as found; sandbox/<topology> on the sandbox)",
    )
    shards: int = Field(2, ge=1, le=8, description="sharded: how many shards")
    shard_topology: Literal["rs1", "rs3", "psa"] = Field(
        "rs3", description="sharded: each shard's replica set"
    )
    mongos: int = Field(2, ge=1, le=8, description="sharded: how many routers")
    balancer: bool = Field(
        True, description="sharded: the balancer moves chunks (on, as MongoDB's by default)"
    )
    uri: str | None = Field(None, description="local: the connection string (${VAR} allowed)")
    members: tuple[LocalMember, ...] = ()
    engine: Literal["auto", "emulator", "mongod"] = "auto"
    election_timeout: Duration | None = Field(None, description="electionTimeoutMillis (sandbox)")
    heartbeat_interval: Duration | None = Field(None, description="heartbeatIntervalMillis")
    heartbeat_timeout: int | None = Field(
        None,
        ge=1,
        description="heartbeatTimeoutSecs (sandbox): silence before a member is DOWN; an "
        "arbiter refuses its vote while it still sees the primary, so it bounds a PSA "
        "set's failover from below",
    )
    oplog_size_mb: int | None = Field(None, gt=0)
    initial_sync_mb_per_s: float | None = Field(None, gt=0)
    cache_mb: int | None = Field(
        None,
        gt=0,
        description="sandbox (emulator): each member's page cache, its working set in memory "
        "(default 64); it starts empty, so a restarted member reads from disk until warm",
    )
    journal_commit_interval: Duration | None = Field(
        None,
        ge=0.001,
        le=0.5,
        description="sandbox: time between the journal's group commits (mongod's "
        "commitIntervalMs, 1-500 ms, default 100 ms): writes acknowledged without j:true "
        "within it are lost with the power",
    )
    port_base: int | None = Field(
        None, ge=1, le=65000, description="sandbox: first port (default: free ports are found)"
    )
    data_mb: int = Field(0, ge=0, description="sandbox: preload this much data before the run")
    keep: bool = Field(False, description="sandbox: leave it running after the run")
    auth: bool | Literal["scram", "x509"] = Field(
        False,
        description="sandbox: require a login, as production sets do: true or scram (a user "
        "with a random password), x509 (a client certificate; needs tls)",
    )
    tls: bool = Field(
        False, description="sandbox: members accept TLS only (a throw-away CA, under tls/)"
    )
    storage: Literal["disk", "memory"] = Field(
        "disk",
        description="sandbox standalone: memory keeps data in the process only (a restart "
        "loses it, as with mongod's inMemory engine)",
    )
    handshake: Literal["hello", "legacy"] = Field(
        "hello",
        description="sandbox: legacy members answer only isMaster (servers before 4.4.2)",
    )
    zones: tuple[str, ...] = Field(
        (),
        description="sandbox: the members' failure domains, given round-robin in member "
        "order (a, b, c: one per zone; a, a, b: two data centres, 2+1), written as each "
        "member's replica-set tag `zone`",
    )
    priorities: tuple[Annotated[float, Field(ge=0, le=1000)], ...] = Field(
        (),
        description="sandbox: each member's priority, in member order (members[].priority, "
        "0-1000; default 1 each): a secondary of a higher priority than the primary's takes "
        "over once it is caught up (MongoDB's priority takeover); 0 never stands",
    )

    def section(self, platform: str, model: type[Options]) -> Options | None:
        """Its `platform` section (`target.<platform>`) if the file gave one: the sections are
        added to the model where the registered platforms are known (below), so a platform
        reads its own through here."""
        found = getattr(self, platform, None)
        return found if isinstance(found, model) else None

    @model_validator(mode="after")
    def _platform_fields(self) -> _Target:
        for section in _TARGET_SECTIONS:
            if getattr(self, section) is not None and section != self.platform:
                raise FieldProblem(
                    (section,), f"a `{section}` section, but the platform is {self.platform}"
                )
        source = member_source(self.platform)
        if source == "discovered":
            if self.platform in _TARGET_SECTIONS and getattr(self, self.platform) is None:
                raise FieldProblem(
                    (self.platform,),
                    f"platform {self.platform} needs its `{self.platform}` "
                    "section (how to reach it and how members map to its objects)",
                )
            if not self.uri:
                raise FieldProblem(("uri",), f"platform {self.platform} needs `uri`")
            if self.members:
                raise FieldProblem(("members",), f"`members` is for platform {_named('listed')}")
        elif source == "listed":
            if not self.members:
                raise FieldProblem(
                    ("members",), f"platform {self.platform} needs `members` (host, start, dbpath)"
                )
            if not self.uri:
                raise FieldProblem(("uri",), f"platform {self.platform} needs `uri`")
        elif self.members or self.uri:
            raise FieldProblem(
                ("members" if self.members else "uri",),
                f"platform {self.platform} builds its own set: drop `uri` and `members`",
            )
        problem = _uri_problem(self.uri) if self.uri else None
        if problem:
            raise FieldProblem(("uri",), problem)
        if source != "built":
            for name in ("storage", "handshake", "journal_commit_interval", "zones",
                         "priorities"):  # fmt: skip
                if name in self.model_fields_set:
                    raise FieldProblem((name,), f"`{name}` shapes a {_named('built')}, not a "
                                       f"{self.platform} target (rsdrill finds what the server "
                                       "does)")  # fmt: skip
        if source != "built" and "tls" in self.model_fields_set:
            raise FieldProblem(("tls",), f"`tls` shapes a {_named('built')}: put tls=true and "
                               "the TLS files in `uri` for a set of your own")  # fmt: skip
        if self.auth == "x509" and not self.tls:
            raise FieldProblem(("auth",), "x509 logins need TLS: add `tls: true`")
        if self.storage == "memory" and self.topology != "standalone":
            raise FieldProblem(("storage",), "in-memory storage is for topology: standalone")
        if self.zones and self.topology == "standalone":
            raise FieldProblem(("zones",), STANDALONE_ZONES)
        if self.zones:
            # A sharded cluster's zones go round-robin over each set's members: the config
            # servers' three and each shard's.
            sharded = self.topology == "sharded"
            count = min(3, member_count(self.shard_topology)) if sharded else None
            try:
                spread(self.zones, count or member_count(self.topology))
            except ValueError as exc:
                smallest = " (the smallest set)" if sharded else ""
                raise FieldProblem(("zones",), f"{exc}{smallest}") from None
        if self.priorities and self.topology != "sharded":
            self._check_priorities()
        self._sharded_fields(source)
        return self

    def _check_priorities(self) -> None:
        count = member_count(self.topology)
        if self.topology in ("standalone", "psa"):
            raise FieldProblem(("priorities",), f"a {self.topology} sandbox has its own "
                               "priorities (an arbiter's is 0)")  # fmt: skip
        if len(self.priorities) != count:
            raise FieldProblem(("priorities",), f"{len(self.priorities)} priorities for "
                               f"{count} member(s): one per member, in member order")  # fmt: skip
        if not any(self.priorities):
            raise FieldProblem(("priorities",), "at least one member needs a priority above "
                               "0 (MongoDB refuses a config none may be primary of)")  # fmt: skip

    def _sharded_fields(self, source: str) -> None:
        if self.topology != "sharded":
            for name in _SHARDED_FIELDS & self.model_fields_set:
                raise FieldProblem((name,), f"`{name}` shapes a sharded cluster: add "
                                   "`topology: sharded`")  # fmt: skip
            return
        if source != "built":
            for name in sorted(_SHARDED_FIELDS & self.model_fields_set):
                raise FieldProblem((name,), f"`{name}` shapes a sharded {_named('built')}; "
                                   f"on {self.platform}, rsdrill finds the cluster's shards "
                                   "and routers from the routers in `uri`")  # fmt: skip
            return
        given = {n for n in _NOT_SHARDED & self.model_fields_set
                 if getattr(self, n) != type(self).model_fields[n].default}  # fmt: skip
        for name in sorted(given):
            raise FieldProblem((name,), f"`{name}` is for a replica-set sandbox; a sharded "
                               "one does not take it yet (docs/sharding.md)")  # fmt: skip
        if self.engine == "mongod":
            raise FieldProblem(("engine",), "a sharded sandbox runs the emulator only (no "
                               "mongos/mongod cluster is built yet)")  # fmt: skip


_SHARDED_FIELDS = {"shards", "shard_topology", "mongos", "balancer"}
# What a replica-set sandbox takes that a sharded one does not (yet).
_NOT_SHARDED = {"auth", "tls", "storage", "handshake", "data_mb", "oplog_size_mb",
                "priorities", "initial_sync_mb_per_s", "cache_mb",
                "journal_commit_interval"}  # fmt: skip


def _named(source: str) -> str:
    """The platforms whose members come from `source`, for a message ("sandbox")."""
    return " or ".join(n for n in PLATFORM_NAMES if member_source(n) == source)


_TARGET_SECTIONS = {n: p.options for n, p in described().items() if p.options is not None}
if TYPE_CHECKING:
    # A platform reads its own section through `Target.section`: shared code names none.
    Target = _Target
else:
    Target = create_model(
        "Target",
        __base__=_Target,
        __doc__=_Target.__doc__,
        __module__=__name__,
        **{name: (options | None, None) for name, options in _TARGET_SECTIONS.items()},
    )
