"""The platforms rsdrill knows, found through the `rsdrill.platforms` entry-point group.

A platform is a package that registers a `Platform` (see `rsdrill/platforms/base.py`) under
that group, as pytest plugins and Chaos Toolkit extensions are registered; the built-ins are
registered the same way in rsdrill's own pyproject.toml. They are also listed here so that a
checkout whose installed metadata predates a built-in still finds it (a test keeps both lists
the same). Nothing is loaded until a platform is asked for: `rsdrill --help` loads none.
"""

from __future__ import annotations

import functools
import logging
from importlib import import_module
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Literal, cast

from rsdrill.errors import PlatformLoadError

if TYPE_CHECKING:
    from rsdrill.platforms.base import Platform

GROUP = "rsdrill.platforms"
_log = logging.getLogger(__name__)

BUILTIN: dict[str, str] = {
    "sandbox": "rsdrill.platforms.sandbox:platform",
    "local": "rsdrill.platforms.local:platform",
    "kubernetes": "rsdrill.platforms.kubernetes:platform",
    "ec2": "rsdrill.platforms.ec2:platform",
    "vsphere": "rsdrill.platforms.vsphere:platform",
}
"""The built-in platforms in the order the schema and messages list them."""


def _load(name: str, reference: str) -> Platform:
    module, _, attribute = reference.partition(":")
    try:
        loaded: Platform = getattr(import_module(module), attribute)
    except (ImportError, AttributeError) as exc:
        raise PlatformLoadError(f"platform {name} ({reference}) cannot be loaded: {exc}") from exc
    if loaded.name != name:
        raise PlatformLoadError(f"platform {name} ({reference}) calls itself {loaded.name!r}")
    return loaded


@functools.cache
def platforms() -> dict[str, Platform]:
    """Every platform by name: the built-ins first, then the others in name order. A
    third-party platform that cannot be loaded is left out with a warning (logged), so one
    broken package does not take every experiment down with it."""
    found = {name: _load(name, reference) for name, reference in BUILTIN.items()}
    for entry in sorted(entry_points(group=GROUP), key=lambda e: e.name):
        if entry.name in found:
            continue
        try:
            found[entry.name] = _load(entry.name, entry.value)
        except PlatformLoadError as exc:
            _log.warning("%s; leaving it out", exc)
    return found


def platform(name: str) -> Platform:
    """The platform called `name` (the experiment model only lets known names through)."""
    return platforms()[name]


MemberSource = Literal["built", "listed", "discovered"]
"""Where a platform's members come from: `built` by the run itself (no `uri`, no `members`),
`listed` in the experiment file (`members` beside `uri`), or `discovered` from the set its `uri`
reaches. Shared code asks this, never a platform's name."""


def member_source(name: str) -> MemberSource:
    """Platform `name`'s `member_source`; `discovered` for one that does not say (an optional
    attribute: a platform written before it existed is reached by its URI)."""
    source = getattr(platform(name), "member_source", "discovered")
    if source not in ("built", "listed", "discovered"):
        raise PlatformLoadError(f"platform {name}: member_source {source!r} is not one of "
                                "built, listed, discovered")  # fmt: skip
    return cast("MemberSource", source)


def on_this_machine(name: str) -> bool:
    """Whether platform `name` faults processes on this machine (signals, faultfs, nftables):
    what the plan calls SIGSTOP, and what local tools `rsdrill check` looks for. Optional
    attribute, False when a platform does not say."""
    return bool(getattr(platform(name), "on_this_machine", False))
