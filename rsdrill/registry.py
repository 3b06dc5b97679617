"""The platforms rsdrill knows, found through the `rsdrill.platforms` entry-point group.

A platform is a package that registers an object with the `Platform` interface (see
`rsdrill/platforms/base.py`) under that group, as pytest plugins and Chaos Toolkit extensions
are registered; the built-ins are registered the same way in rsdrill's own pyproject.toml.
Nothing is loaded until a platform is asked for: `rsdrill --help` loads none.

This module sits below everything that uses a platform, so it knows a loaded platform only by
its name (`Registered`); each layer above reads it through the interface it relies on
(`experiment/catalog.py: described`, `platforms/base.py: platform`).
"""

from __future__ import annotations

import functools
import logging
from importlib.metadata import EntryPoint, entry_points
from typing import Literal, Protocol, cast

from rsdrill.errors import PlatformLoadError

GROUP = "rsdrill.platforms"
DISTRIBUTION = "rsdrill"
"""The distribution whose platforms are the built-ins, listed before any other."""
_log = logging.getLogger(__name__)


class Registered(Protocol):
    """What the registry itself reads of a loaded platform."""

    @property
    def name(self) -> str: ...


def _load(entry: EntryPoint) -> Registered:
    try:
        loaded: Registered = entry.load()
    except (ImportError, AttributeError) as exc:
        raise PlatformLoadError(
            f"platform {entry.name} ({entry.value}) cannot be loaded: {exc}"
        ) from exc
    if getattr(loaded, "name", None) != entry.name:
        raise PlatformLoadError(f"platform {entry.name} ({entry.value}) calls itself "
                                f"{getattr(loaded, 'name', None)!r}")  # fmt: skip
    return loaded


def _built_in(entry: EntryPoint) -> bool:
    return entry.dist is not None and entry.dist.name == DISTRIBUTION


@functools.cache
def platforms() -> dict[str, Registered]:
    """Every platform by name: the built-ins first, then the others; within each, those whose
    members are built by the run, then listed, then discovered (`member_source`), each in name
    order (sandbox, local, ec2, ...). A built-in that cannot be loaded is an error; a
    third-party platform that cannot be is left out with a warning (logged), so one broken
    package does not take every experiment down with it."""
    found: dict[str, tuple[bool, Registered]] = {}
    for entry in entry_points(group=GROUP):
        if entry.name in found:
            continue
        try:
            found[entry.name] = (_built_in(entry), _load(entry))
        except PlatformLoadError as exc:
            if _built_in(entry):
                raise
            _log.warning("%s; leaving it out", exc)

    def rank(name: str) -> tuple[bool, int, str]:
        built_in, loaded = found[name]
        return not built_in, _SOURCES.index(_source_of(name, loaded)), name

    return {name: found[name][1] for name in sorted(found, key=rank)}


def built_in() -> tuple[str, ...]:
    """The names of the platforms rsdrill itself registers, in the registry's order."""
    own = {e.name for e in entry_points(group=GROUP) if _built_in(e)}
    return tuple(name for name in platforms() if name in own)


def platform(name: str) -> Registered:
    """The platform called `name` (the experiment model only lets known names through)."""
    return platforms()[name]


MemberSource = Literal["built", "listed", "discovered"]
"""Where a platform's members come from: `built` by the run itself (no `uri`, no `members`),
`listed` in the experiment file (`members` beside `uri`), or `discovered` from the set its `uri`
reaches. Shared code asks this, never a platform's name."""


_SOURCES: tuple[MemberSource, ...] = ("built", "listed", "discovered")


def _source_of(name: str, loaded: Registered) -> MemberSource:
    source = getattr(loaded, "member_source", "discovered")
    if source not in _SOURCES:
        raise PlatformLoadError(f"platform {name}: member_source {source!r} is not one of "
                                f"{', '.join(_SOURCES)}")  # fmt: skip
    return cast("MemberSource", source)


def member_source(name: str) -> MemberSource:
    """Platform `name`'s `member_source`; `discovered` for one that does not say (an optional
    attribute: a platform written before it existed is reached by its URI)."""
    return _source_of(name, platform(name))


def on_this_machine(name: str) -> bool:
    """Whether platform `name` faults processes on this machine (signals, faultfs, nftables):
    what the plan calls SIGSTOP, and what local tools `rsdrill check` looks for. Optional
    attribute, False when a platform does not say."""
    return bool(getattr(platform(name), "on_this_machine", False))
