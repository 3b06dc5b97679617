"""Targets: where the replica set runs, how to reach its members' hosts, and which member a
selection like `primary` means at the moment a fault is injected."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from rsdrill.experiment.schema import Fault
    from rsdrill.injectors.base import Injector


class TargetError(Exception):
    """The target cannot be set up or reached; nothing was injected."""


class ProcessHosts(Protocol):
    """The members' hosts as OS processes on this machine (sandbox and local platforms)."""

    def pid(self, host: str) -> int | None: ...

    def kill(self, host: str) -> int: ...

    def stop(self, host: str) -> int: ...

    def cont(self, host: str) -> int: ...

    def start(self, host: str, *, wipe: bool) -> None: ...

    def wipe(self, host: str) -> None:
        """Empty the data directory of a member that is not running."""
        ...

    def restart_action(self, host: str, *, wipe: bool) -> dict[str, object]: ...


class RunTarget(Protocol):
    """A replica set an experiment runs against."""

    platform: str
    topology: str
    uri: str
    members: list[str]
    # Whether the target stays as it is after the run (nothing to tear down once set up).
    keep: bool

    def setup(self) -> None: ...

    def teardown(self) -> None: ...

    def injector(self, fault: Fault, host: str) -> Injector:
        """The platform's injector for `fault` on member `host` (every kind but stepdown,
        which works the same on every platform)."""
        ...

    def recover_action(self) -> dict[str, object] | None:
        """What `rsdrill recover` must do about the target itself if this run dies (for a
        kept target: only while it is being set up)."""
        ...
