"""What every fault has, whatever its kind, and the questions any fault answers.

Each kind's model (a module of this package) subclasses `FaultBase`: its `kind` a literal, its
own fields, and the answers that depend on them. A field of another kind is an unknown key in a
file and a type error in code: read one only after narrowing (`fault.kind == "host-kill"`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar, Literal, Self, TypeVar

from pydantic import BaseModel, Field, model_validator

from rsdrill.fields import Duration, FieldProblem, Role, Strict, format_duration

if TYPE_CHECKING:
    from rsdrill.domains import Placement
    from rsdrill.faults.spec import KindSpec, LocalTool
    from rsdrill.layout import ShardedLayout


Options = TypeVar("Options", bound=BaseModel)


class SelectMember(Strict):
    member: str = Field(pattern=r"^[^:\s]+:\d+$")


class SelectCount(Strict):
    count: int = Field(ge=1)
    role: Literal["any", "secondary", "data"] = Field(
        "any", description="any member, secondaries only, or data-bearing members"
    )


class SelectShard(Strict):
    """A member of one shard's replica set (sharded targets)."""

    shard: str = Field(description="the shard's name (shard0, …), or any: the first shard "
                       "that has such a member")  # fmt: skip
    role: Literal["primary", "secondary"] = "primary"


class SelectRouter(Strict):
    """Routers (mongos) of a sharded target: the first `mongos` of them, in the URI's order."""

    mongos: int = Field(ge=1, description="how many routers")


class SelectDomain(Strict):
    """Every member of one failure domain: a zone (tag `zone`, or `az`, `dc`, …; a sandbox's
    `zones`; on EC2 the instance's Availability Zone, on Kubernetes the node's zone label, on
    vSphere the VM's cluster), a region (tag `region`, or the platform's), or every member whose
    tags include all of `tag` (replica-set tags, and the platform's: vSphere's `esxi_host`).
    One of the three. docs/failure-domains.md."""

    zone: str | None = Field(
        None, min_length=1, description="the zone's name (the members' tags, or their platform's)"
    )
    region: str | None = Field(
        None,
        min_length=1,
        description="the region's name (the members' tag `region`, or their platform's)",
    )
    tag: dict[str, str] | None = Field(
        None,
        min_length=1,
        description="tags every selected member has: replica-set member tags, or the "
        "platform's (vSphere: esxi_host)",
    )
    domains: Literal["minority", "majority"] | None = Field(
        None,
        description="a zone by what its loss costs: majority, a zone whose loss leaves fewer "
        "than a majority of the votes (no primary: the 2+1 trap); minority, one whose loss "
        "leaves a majority. The primary's zone when it is one, else the one of the most votes",
    )

    @model_validator(mode="after")
    def _one_domain(self) -> Self:
        given = [n for n in _DOMAIN_KEYS if getattr(self, n) is not None]
        if len(given) != 1:
            raise FieldProblem((), "select one domain: zone, region, tag or domains (not "
                               f"{' and '.join(given) or 'none'})")  # fmt: skip
        return self

    @property
    def key(self) -> str:
        """The field that names the domain (zone, region, tag or domains), for messages."""
        return next(n for n in _DOMAIN_KEYS if getattr(self, n) is not None)

    def among(self, placed: Sequence[Placement], primary: str | None = None) -> SelectDomain:
        """The domain itself, or for `domains` the zone of `placed` it names now (ValueError:
        no zone fits). Of several: the primary's zone (`primary`, its host), else the one of the
        most votes, the one first met of equals: the worst case when the primary is not known."""
        from rsdrill.domains import by_zone, majority_losing_zones

        if self.domains is None:
            return self
        votes = {z: sum(p.votes for p in held) for z, held in by_zone(placed).items() if z}
        if not votes:
            raise ValueError("no member has a zone")
        losing = majority_losing_zones(placed)
        fits = [z for z in votes if (z in losing) == (self.domains == "majority")]
        if not fits:
            held = ", ".join(f"{z}: {v}" for z, v in votes.items())
            total = sum(p.votes for p in placed)
            raise ValueError(f"no zone holds a {self.domains} of the {total} votes ({held})")
        home = next((p.zone for p in placed if p.host == primary), None)
        return SelectDomain(zone=home if home in fits else max(fits, key=lambda z: votes[z]))

    def matches(self, member: Placement) -> bool:
        """Whether `member` is in this domain (of `domains`: resolve it with `among` first)."""
        assert self.domains is None, "a zone by what its loss costs: `among` names it"
        if self.zone is not None:
            return member.zone == self.zone
        if self.region is not None:
            return member.region == self.region
        tags = dict(member.tags)
        return all(tags.get(k) == v for k, v in (self.tag or {}).items())

    def __str__(self) -> str:
        if self.domains is not None:
            return f"the zone holding a {self.domains} of the votes"
        if self.zone is not None:
            return f"zone {self.zone}"
        if self.region is not None:
            return f"region {self.region}"
        return "tag " + ", ".join(f"{k}={v}" for k, v in (self.tag or {}).items())


_DOMAIN_KEYS = ("zone", "region", "tag", "domains")

ConfigPrimary = Literal["config-primary"]
"""The config server replica set's primary (sharded targets)."""

Selection = (
    Role | ConfigPrimary | SelectMember | SelectCount | SelectShard | SelectRouter | SelectDomain
)


def reachable_hosts(
    selection: Selection, members: Sequence[str], layout: ShardedLayout | None
) -> list[str]:
    """The hosts a selection may act on (which of them, only the moment tells): each must be
    found on its platform before anything is injected."""
    if isinstance(selection, SelectMember):
        return [selection.member]
    if layout is None:
        return list(members)
    if isinstance(selection, SelectRouter):
        return list(layout.routers[: selection.mongos])
    if isinstance(selection, SelectShard):
        names = list(layout.shards) if selection.shard == "any" else [selection.shard]
        return [h for name in names for h in layout.shards.get(name, ())]
    if selection == "config-primary":
        return list(layout.config)
    return list(members)


def describe_selection(selection: Selection) -> str:
    """A fault's `select:` in words."""
    if isinstance(selection, SelectMember):
        return f"member {selection.member}"
    if isinstance(selection, SelectCount):
        n = selection.count
        if selection.role == "secondary":
            return f"{n} secondar{'y' if n == 1 else 'ies'} at that moment"
        what = "data-bearing member" if selection.role == "data" else "member"
        return f"{n} {what}{'' if n == 1 else 's'} at that moment (secondaries first)"
    if isinstance(selection, SelectShard):
        shard = "any shard" if selection.shard == "any" else f"shard {selection.shard}"
        return f"the {selection.role} of {shard} at that moment"
    if isinstance(selection, SelectRouter):
        n = selection.mongos
        return f"{'the first router' if n == 1 else f'the first {n} routers'}"
    if isinstance(selection, SelectDomain):
        return (
            f"every member of {selection}"
            if selection.tag is None
            else (f"every member with {selection}")
        )
    if selection == "config-primary":
        return "the config servers' primary at that moment"
    if selection == "arbiter":
        return "the arbiter"
    article = "the" if selection == "primary" else "a"
    return f"{article} {selection} at that moment"


class FaultBase(Strict):
    """The fields every fault has, whatever its kind (the first fields of each kind's model)."""

    SPEC: ClassVar[KindSpec]

    at: Duration = Field(description="when, from the start of the probes")
    kind: str
    select: Selection = "primary"
    duration: Duration | None = Field(
        None, description="how long the fault lasts before it is reverted"
    )
    engine: str | None = Field(
        None,
        description="the platform's fault engine (kubernetes: chaos-mesh, litmus, native; "
        "ec2: api, fis); default: the platform's own API",
    )
    approximate: bool = Field(
        False,
        description="run it although the platform only approximates it (see `rsdrill faults`); "
        "the result records the approximation",
    )
    one_way: bool = Field(
        False,
        description="run it although it cannot be undone within the run (instance terminate, "
        "Node delete, EBS modify_volume, data-loss's wipe: see `rsdrill faults`)",
    )
    scope: Literal["member", "node", "host"] = Field(
        "member",
        description="member: its process/pod/instance/VM; node: its Kubernetes node; "
        "host: every VM on its ESXi host",
    )

    @model_validator(mode="after")
    def _kind_rules(self) -> Self:
        if self.SPEC.needs_duration and self.duration is None:
            raise FieldProblem(
                ("duration",), f"{self.kind} needs a `duration` (then it is reverted)"
            )
        self.check()
        return self

    def check(self) -> None:
        """The kind's check across the fault's fields: raises `FieldProblem` (located in it)."""

    @property
    def revert_after(self) -> float | None:
        """Seconds from injection to revert, or None when the fault is not reverted."""
        return self.duration if self.SPEC.reverted else None

    def plan_words(self, platform: str) -> str:
        """What `rsdrill plan` says the fault does when injected on `platform`."""
        raise NotImplementedError(self.kind)

    def lasting(self, done: str) -> str:
        """The plan words of a fault that holds for its `duration`: what it does, then for how
        long."""
        return done if self.duration is None else f"{done} for {format_duration(self.duration)}"

    def plan_revert_words(self, platform: str, them: str) -> str:
        """What `rsdrill plan` says its revert does ("it" or "them" for the member or members)."""
        raise NotImplementedError(self.kind)

    def out_of_reach(self) -> bool:
        """While in force its members are up but reach neither the clients nor the rest of
        the set (a zone cut off, which keeps its own primary if it holds the majority): the
        quorum guard says so, not that they are down."""
        return False

    def takes_member_down(self) -> bool:
        """While in force, its member is out of the set's majority: the quorum guard counts
        it, and the oplog-window guard bounds how long (False: slowed or troubled, not gone)."""
        return True

    def rebuilds_data(self) -> bool:
        """Its member comes back on rebuilt data (a full initial sync, a restore), not by
        catching up from the oplog: the oplog-window guard does not bound it."""
        return False

    def local_tools(self) -> tuple[LocalTool, ...]:
        """What injecting it on the sandbox and local platforms needs of this machine."""
        return ()

    def section(self, platform: str, model: type[Options]) -> Options | None:
        """Its `platform` section (`faults[i].<platform>`) if the file gave one: the sections
        are added to the models where the registered platforms are known (experiment/schema.py),
        so a platform reads its own through here."""
        found = getattr(self, platform, None)
        return found if isinstance(found, model) else None
