"""What a fault kind states about itself beyond its fields, and how a platform carries it out.

A kind is one module of this package: its fault model (a real class, its fields and their
cross-field check, when it is reverted, how `rsdrill plan` words it) with a `KindSpec` as the
class's `SPEC`. A platform states its `Way`s per kind (`Platform.ways`, its package's
`ways.py`); a kind done the same on every platform states its one way here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Support = Literal["exact", "approximate", "one-way"]
"""exact: the fault itself; approximate: something close to it (said in the cell); one-way: it
cannot be undone within the run (a terminated instance, a volume modification AWS allows once
per 6 hours, wiped data, a deleted Node)."""

OPT_IN: dict[Support, str] = {"approximate": "approximate", "one-way": "one_way"}
"""The fault field that allows a way of this support (exact ways need none)."""

MARKS: dict[Support, str] = {"exact": "", "approximate": " *approx.*", "one-way": " *one-way*"}
"""How the tables and messages mark a way's support."""

LocalTool = Literal["nftables", "fuse"]
"""What the sandbox and local platforms need of this machine to inject a fault (`rsdrill check`
looks for it): the `nft` command, or FUSE for faultfs."""


@dataclass(frozen=True)
class When:
    """The fault options under which a way is taken: in the words the tables show, and as a
    test of a fault of the way's kind."""

    words: str
    applies: Callable[[Any], bool]


@dataclass(frozen=True)
class Way:
    """One way a platform carries a kind out (a platform's `ways`, or a kind's own `way`)."""

    how: str
    support: Support = "exact"
    engine: str | None = None
    """The fault's `engine` that takes this way (None: the platform has no engines)."""
    when: When | None = None
    """The fault options under which this way is taken; None: the engine's way when no other
    of its ways applies."""
    privileges: tuple[str, ...] = ()
    """What the identity rsdrill runs as must be allowed, to inject and to revert: Kubernetes
    RBAC as `verbs resource[/subresource][.group]` (comma-separated verbs; in the target's
    namespace unless it ends in ` cluster-wide`), AWS IAM actions, vSphere privileges. The
    Kubernetes preflight, `rsdrill schedule render`'s Role and the EC2 and vSphere plans read
    them from here."""

    def line(self, kind: str, platform: str) -> str:
        """This way as the table states it, for messages."""
        engine = f" (engine {self.engine})" if self.engine else ""
        return f"{kind} on {platform}{engine}: {self.how}{MARKS[self.support]}"


@dataclass(frozen=True)
class KindSpec:
    """A kind's name, meaning and what the rest of rsdrill must know of it that does not
    depend on one fault's fields (those answers are the fault model's methods)."""

    kind: str
    meaning: str
    fields_doc: str = ""
    needs_duration: bool = False
    """Lasts until reverted: without a `duration` it would outlive the run."""
    reverted: bool = True
    """False: nothing to revert (a stepdown ends by itself; lost data comes back by a restore)."""
    way: Way | None = None
    """The one way every platform carries it out by, through the server (its injector is in
    `rsdrill.platforms.command`); None: each platform's own `ways`."""
    server_privileges: tuple[tuple[str, str], ...] = field(default=(), kw_only=True)
    """(action on the cluster resource, the built-in role that grants it) its own command
    needs of a server with access control (`rsdrill check` asks for them)."""
    needs_test_commands: bool = field(default=False, kw_only=True)
    """Its command exists only on a mongod started with enableTestCommands (`rsdrill check`
    asks every member)."""
    disaster: bool = field(default=False, kw_only=True)
    """A disaster only a restore brings the set back from: loading needs a step with `marks:
    restore`, the run records its time for the disaster-recovery metrics, a random schedule
    never draws it."""
    replica_set_only: str = field(default="", kw_only=True)
    """Why a standalone server cannot take it (empty: it can); loading refuses it there."""
    drawn: Mapping[str, Any] = field(default_factory=dict, kw_only=True)
    """What a fault of it drawn by its name alone (`faults: {random: {kinds: [name]}}`) is
    given beyond its defaults, to do something."""
    for_good: Mapping[str, Any] = field(default_factory=dict, kw_only=True)
    """The fields that keep a fault of it in force to the end of the run: a replay gives them
    to a fault the original run never reverted (empty: a `duration` of None does)."""
    sharded: Literal["", "members", "members and routers"] = field(default="", kw_only=True)
    """What of a sharded target it acts on so far (empty: loading refuses it there)."""
    unavailable: str = field(default="", kw_only=True)
    """What loading says, after the kind's name, on a platform without an injector for it
    (`{platform}` is replaced; empty: the generic `is not available on P (it has: ...)`)."""
