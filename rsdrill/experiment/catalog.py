"""Which way a registered platform carries a fault out, and what that asks of the fault.

A kind done the same on every platform states its one way in its spec; the others are each
platform's (`Platform.ways`). `way_of` decides, per fault, which way a platform takes; a fault
whose way is approximate loads only with `approximate: true`, a one-way one only with
`one_way: true`. A platform carries a kind out only if it states a way for it and registers an
injector for it, or if the kind is done the same on every platform.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol, cast

from rsdrill import registry
from rsdrill.faults import KINDS
from rsdrill.faults.spec import OPT_IN, Way

if TYPE_CHECKING:
    from pydantic import BaseModel

    from rsdrill.faults import Fault


class PlatformModel(Protocol):
    """What the experiment model reads of a platform (all of it data; the whole interface is
    `platforms/base.py: Platform`)."""

    @property
    def name(self) -> str: ...

    @property
    def title(self) -> str:
        """The heading of its column in the fault tables (`rsdrill faults`, docs/faults.md);
        platforms with the same title and ways share one (sandbox and local)."""
        ...

    @property
    def ways(self) -> Mapping[str, tuple[Way, ...]]:
        """Fault kind → the ways it carries the kind out by, as the tables state them: an
        engine's first way is its default and the first way's engine the default engine; a way
        with `when` is taken only under those options. A kind without a way here (or without an
        injector) is refused when an experiment is loaded: a platform without ways carries out
        only the kinds done the same on every platform (stepdown, mongodb-fail-command)."""
        ...

    @property
    def options(self) -> type[BaseModel] | None:
        """The model of `target.<name>` (None: the platform has no section of its own)."""
        ...

    @property
    def fault_options(self) -> type[BaseModel] | None:
        """The model of a fault's `<name>` options (None: it has none)."""
        ...

    @property
    def injectors(self) -> Mapping[str, str]:
        """Fault kind → `module:function`, an `InjectorFactory` (imported only when a run
        needs it)."""
        ...


def described() -> dict[str, PlatformModel]:
    """Every registered platform (the registry's order) as the experiment model reads it."""
    return cast("dict[str, PlatformModel]", registry.platforms())


def ways_of(kind: str, platform: str) -> tuple[Way, ...]:
    """The ways the registered `platform` carries `kind` out by, an engine's first way being
    its default and the first way's engine the default engine: the kind's own `way` if it is
    done the same on every platform, else the platform's (none: refused when loaded)."""
    found = described().get(platform)
    if found is None:
        return ()
    spec = KINDS[kind]
    return (spec.way,) if spec.way is not None else tuple(found.ways.get(kind, ()))


def available_kinds(platform: str) -> tuple[str, ...]:
    """The kinds `platform` carries out: those it has a way and an injector for, and those done
    the same on every platform (their one way and injector)."""
    injectors = described()[platform].injectors
    return tuple(
        k
        for k, spec in KINDS.items()
        if ways_of(k, platform) and (spec.way is not None or k in injectors)
    )


def _shares_column(one: PlatformModel, other: PlatformModel) -> bool:
    return one.title == other.title and one.ways == other.ways


def columns() -> dict[str, PlatformModel]:
    """The tables' platform columns, each by the first registered platform in it: platforms
    with the same title and ways share one (local the sandbox's)."""
    found: dict[str, PlatformModel] = {}
    for name, platform in described().items():
        if not any(_shares_column(platform, first) for first in found.values()):
            found[name] = platform
    return found


def platform_column(platform: str) -> str:
    """The column of the tables a platform's faults are in ("local" shares the sandbox's)."""
    found = described().get(platform)
    if found is None:
        return platform
    return next(name for name, first in columns().items() if _shares_column(found, first))


def way_of(platform: str, fault: Fault) -> Way | None:
    """The way `platform` carries `fault` out, from its kind, engine and options; None when
    the platform has none (its own check refuses the fault)."""
    ways = ways_of(fault.kind, platform)
    if not ways:
        return None
    engine = fault.engine or ways[0].engine
    for way in ways:
        if way.engine not in (None, engine):
            continue
        if way.when is None or way.when.applies(fault):
            return way
    return None


def privileges_of(platform: str, fault: Fault) -> tuple[str, ...]:
    """What injecting and reverting `fault` on `platform` needs (its way's `privileges`)."""
    way = way_of(platform, fault)
    return way.privileges if way is not None else ()


def opt_in_problem(platform: str, fault: Fault) -> str | None:
    """Why `fault` may not run on `platform` as written: its way is approximate or one-way and
    the fault does not say it accepts that; None when it may."""
    way = way_of(platform, fault)
    if way is None or way.support == "exact":
        return None
    accepted = fault.approximate if way.support == "approximate" else fault.one_way
    if accepted:
        return None
    what = {"approximate": "an approximation", "one-way": "one-way: it cannot be undone"}
    return (
        f"{what[way.support]} ({way.line(fault.kind, platform)}); set "
        f"`{OPT_IN[way.support]}: true` on the fault to run it"
    )


def approximation(platform: str, fault: Fault) -> str | None:
    """What `platform` does instead of `fault` when it only approximates it (result.json's
    `approximation`), else None."""
    way = way_of(platform, fault)
    return way.how if way is not None and way.support == "approximate" else None


def is_one_way(platform: str, fault: Fault) -> bool:
    """Whether `fault` on `platform` cannot be undone within the run."""
    way = way_of(platform, fault)
    return way is not None and way.support == "one-way"


def platform_names() -> tuple[str, ...]:
    """The platforms `rsdrill faults --platform` knows: the registered ones."""
    return tuple(described())
