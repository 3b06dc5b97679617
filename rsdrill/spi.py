"""What a third-party platform or plugin codes against, and nothing else.

A platform is an object with the `Platform` interface (usually a `PackagePlatform`) named by an
entry point of group `rsdrill.platforms`; its options are `Strict` models, its load-time checks
raise `FieldProblem`, its `ways` map each fault kind to the `Way`s it carries it out by, and its
injectors (`InjectorFactory`) build an `Injector` for one fault on one member of its
`RunTarget`. A plugin of a run's events implements the hooks of `RunEventSpecs` with
`@hookimpl`, named by an entry point of group `rsdrill.plugins`. Names outside this module may
change between releases; these change only with `SPI_VERSION`.
"""

from rsdrill.faults.spec import Way, When
from rsdrill.fields import FieldProblem, Strict
from rsdrill.hooks import RunEvents as RunEventSpecs
from rsdrill.hooks import hookimpl
from rsdrill.platforms.base import (
    Injector,
    InjectorFactory,
    PackagePlatform,
    Platform,
    RevertAction,
    RunTarget,
)

SPI_VERSION = 1
"""Raised when a name here changes or goes: a package can refuse a version it does not know."""

__all__ = [
    "SPI_VERSION",
    "FieldProblem",
    "Injector",
    "InjectorFactory",
    "PackagePlatform",
    "Platform",
    "RevertAction",
    "RunEventSpecs",
    "RunTarget",
    "Strict",
    "Way",
    "When",
    "hookimpl",
]
