"""What the engine and the experiment model know of a platform: the typed interfaces every
platform implements.

- `Platform`: one entry of the `rsdrill.platforms` entry-point group (see `rsdrill/registry.py`):
  its name, its column of the fault tables (`title`, and its `ways`: what it does for each kind
  it carries out), the models of its `target.<name>` and `faults[i].<name>` sections, the
  load-time check of an experiment, what it adds to a plan, and the target a run uses.
- `RunTarget`: a replica set an experiment runs against (members, how rsdrill's own connections
  reach them, setup, teardown).
- `InjectorFactory`: what a platform registers per fault kind in its `injectors` table: builds
  the injector for one fault on one member of its target. A kind missing from the table or
  from its `ways` is refused when the experiment is loaded (`experiment/catalog.py:
  available_kinds`).
- `Injector`: one fault on one platform. `describe()` says what will happen (no side effects);
  `revert_action()` is written to the journal *before* `inject()` so that `rsdrill recover` can
  undo the fault if the run dies; `verify()` confirms the fault really landed before its clock
  is trusted; `revert()` undoes it. An injector whose platform judges the fault itself (a Litmus
  ChaosResult) may also have `report() -> dict`, merged into the fault's `detail` in the result
  once it is reverted.
- `ProcessHosts`: members' hosts as OS processes on this machine (sandbox and local).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast, runtime_checkable

from rsdrill import registry
from rsdrill.domains import PlatformPlace
from rsdrill.errors import InjectionError, TargetError
from rsdrill.experiment.catalog import PlatformModel
from rsdrill.faults import FAULT_CLASSES, Fault
from rsdrill.faults.spec import Way
from rsdrill.registry import MemberSource

if TYPE_CHECKING:
    from pydantic import BaseModel

    from rsdrill.connection import ConnectOptions
    from rsdrill.experiment.plan import PlatformPlan
    from rsdrill.experiment.schema import Experiment, PlatformChecks

__all__ = [
    "InjectionError",
    "Injector",
    "InjectorFactory",
    "MachineTarget",
    "PackagePlatform",
    "Platform",
    "ProcessHosts",
    "ReadableData",
    "RevertAction",
    "RunTarget",
    "TargetError",
]

RevertAction = Callable[[dict[str, Any]], str]
"""Carries out one journaled revert action from the journal alone; says what it did."""


class Injector(Protocol):
    @property
    def kind(self) -> str:
        """The fault kind it injects."""
        ...

    @property
    def target(self) -> str:
        """The member (or what stands for it) it acts on, as messages name it."""
        ...

    def describe(self) -> str: ...

    def revert_action(self) -> dict[str, Any] | None: ...

    def inject(self) -> None: ...

    def verify(self, timeout_s: float) -> bool: ...

    def revert(self) -> None: ...


class ProcessHosts(Protocol):
    """The members' hosts as OS processes on this machine (sandbox and local platforms)."""

    def pid(self, host: str) -> int | None: ...

    def kill(self, host: str) -> int: ...

    def stop(self, host: str) -> int: ...

    def cont(self, host: str) -> int: ...

    def start(self, host: str, *, wipe: bool, boot_s: float = 0.0) -> None:
        """Start the member unless it runs; with `boot_s` its host boots that long first (the
        call returns at once)."""
        ...

    def wipe(self, host: str) -> None:
        """Empty the data directory of a member that is not running."""
        ...

    def restart_action(self, host: str, *, wipe: bool) -> dict[str, object]: ...


class MachineTarget(Protocol):
    """A target whose members are processes of this machine (sandbox and local): what their
    injectors act through."""

    members: list[str]
    hosts: ProcessHosts

    @property
    def connect_options(self) -> ConnectOptions:
        """How rsdrill's own connections reach the members (see `RunTarget`)."""
        ...

    def faultfs_mountpoint(self, host: str) -> Path | None:
        """The faultfs mount over the member's data directory (None: not on faultfs)."""
        ...


@runtime_checkable
class ReadableData(Protocol):
    """A target whose members' data directories this machine can read (sandbox and local):
    the audit reads the files their rollbacks wrote there."""

    def data_directory(self, host: str) -> Path | None:
        """The member's data directory (None: not known)."""
        ...


class RunTarget(Protocol):
    """A replica set an experiment runs against."""

    # Read-only to the runner: a target may hold narrower types (a Literal topology) or
    # compute one (keep).
    @property
    def platform(self) -> str: ...

    @property
    def topology(self) -> str: ...

    @property
    def uri(self) -> str: ...

    @property
    def members(self) -> list[str]: ...

    @property
    def connect_options(self) -> ConnectOptions:
        """How rsdrill's own connections (probes, guards, selection, injectors) reach the
        members: the TLS, login and appName of `uri`. Final once `setup()` has returned; the
        run passes it to everything it builds, there is no process-wide default."""
        ...

    @property
    def keep(self) -> bool:
        """Whether the target stays as it is after the run (nothing to tear down once set up)."""
        ...

    def setup(self) -> None:
        """Build or find the set and check it can be run against (`rsdrill check` calls it
        too: off the sandbox it changes nothing)."""
        ...

    def prepare(self) -> None:
        """What only a run changes on the members before its first fault, once `setup()` has
        passed (local members restarted under libfaketime for clock-skew)."""
        ...

    def teardown(self) -> None: ...

    def recover_action(self) -> dict[str, object] | None:
        """What `rsdrill recover` must do about the target itself if this run dies (for a
        kept target: only while it is being set up)."""
        ...


@runtime_checkable
class PlacesMembers(Protocol):
    """A run target whose platform knows where each member runs, whatever its replica-set
    tags say (an EC2 instance's Availability Zone and region, a vSphere VM's cluster,
    datacenter and ESXi host)."""

    def platform_placements(self) -> dict[str, PlatformPlace]:
        """Each member's zone, region and platform tags as the platform places it; set up
        first."""
        ...


KindFault = TypeVar("KindFault", bound=Fault)

InjectorFactory = Callable[[Any, KindFault, str], Injector]
"""(the platform's run target, a fault of the kind it is registered for, the member) → the
injector of that fault there: `InjectorFactory[HostKillFault]`."""


class Platform(PlatformModel, Protocol):
    """A platform as the experiment model and the runner use it: what the model reads of it
    (`PlatformModel`), asks of it once a file is read and shows in a plan, and what a run uses.

    Loading its entry point must stay cheap (no SDK import): the models are pydantic classes,
    and everything else is imported when a method is called.
    """

    def check_experiment(self, exp: Experiment) -> None:
        """Refuse (raise FieldProblem) what this platform cannot carry out, before any run."""
        ...

    def plan_details(self, exp: Experiment) -> list[str]:
        """Lines the plan shows about what the platform will create (may be empty)."""
        ...

    def make_target(self, exp: Experiment, out_dir: Path) -> RunTarget:
        """The run's target (not set up yet)."""
        ...

    def revert_actions(self) -> Mapping[str, RevertAction]:
        """Its journaled revert actions, by name (`<platform>.<action>`)."""
        ...


@dataclass(frozen=True)
class PackagePlatform:
    """A `Platform` made of one package's modules, each imported only when needed: `checks`
    (`check_experiment`), `planner` (`plan_details`, if the plan shows more), `<package>.target`
    (`make_target`) and, if it has journaled actions of its own, `actions` (`REVERT_ACTIONS`).
    Its `ways` and `title` are given as they are (the `WAYS` and `TITLE` of its `ways.py`).
    `sdk` names the modules its target needs and `extra` the pip extra that brings them: a run
    or check without them stops in one line saying what to install."""

    name: str
    package: str
    checks: str
    planner: str | None = None
    options: type[BaseModel] | None = None
    fault_options: type[BaseModel] | None = None
    actions: str | None = None
    injectors: Mapping[str, str] = field(default_factory=dict)
    ways: Mapping[str, tuple[Way, ...]] = field(default_factory=dict)
    title: str = field(kw_only=True)
    sdk: tuple[str, ...] = field(default=(), kw_only=True)
    extra: str | None = field(default=None, kw_only=True)
    member_source: MemberSource = field(default="discovered", kw_only=True)
    """See `rsdrill.registry.member_source`."""
    on_this_machine: bool = field(default=False, kw_only=True)
    """See `rsdrill.registry.on_this_machine`."""

    def check_experiment(self, exp: Experiment) -> None:
        importlib.import_module(self.checks).check_experiment(exp)

    def plan_details(self, exp: Experiment) -> list[str]:
        if self.planner is None:
            return []
        return list(importlib.import_module(self.planner).plan_details(exp))

    def make_target(self, exp: Experiment, out_dir: Path) -> RunTarget:
        self._require_sdk()
        target: RunTarget = importlib.import_module(f"{self.package}.target").make_target(
            exp, out_dir
        )
        return target

    def _require_sdk(self) -> None:
        for module in self.sdk:
            try:
                importlib.import_module(module)
            except ImportError:
                raise TargetError(f"{self.name}: {module} is not installed: pip install "
                                  f"'rsdrill[{self.extra or self.name}]'") from None  # fmt: skip

    def revert_actions(self) -> Mapping[str, RevertAction]:
        if self.actions is None:
            return {}
        actions: Mapping[str, RevertAction] = importlib.import_module(self.actions).REVERT_ACTIONS
        return actions


def _imported(reference: str) -> Any:
    module, _, attribute = reference.partition(":")
    return getattr(importlib.import_module(module), attribute)


COMMAND_INJECTORS: dict[str, str] = {
    kind: f"rsdrill.platforms.command.{cls.__module__.rpartition('.')[2]}:injector"
    for kind, cls in FAULT_CLASSES.items()
    if cls.SPEC.way is not None
}
"""The kinds done the same way on every platform → `module:function`, the `InjectorFactory`
every platform uses for them: `injector` of the module of `platforms/command/` named as the
kind's own module of `rsdrill/faults/`."""


def platform(name: str) -> Platform:
    """The registered platform called `name` as the engine uses it (the registry, below every
    layer that uses one, knows it by name only)."""
    return cast("Platform", registry.platform(name))


def platforms() -> dict[str, Platform]:
    """Every registered platform (the registry's order) as the engine uses it."""
    return cast("dict[str, Platform]", registry.platforms())


def injector_factory(platform: Platform, kind: str) -> InjectorFactory[Any]:
    """What builds a fault of `kind` on `platform`: the kind's own injector if one works on
    every platform (stepdown: `platforms/command/`), else the one the platform registered
    (looked up by the kind's name, so typed for any fault: the run passes it a fault of that
    kind only)."""
    factory: InjectorFactory[Any] = _imported(
        COMMAND_INJECTORS.get(kind) or platform.injectors[kind]
    )
    return factory


if TYPE_CHECKING:
    # The built-in platforms' entry points are PackagePlatforms: mypy checks here that one is a
    # Platform.
    _PLATFORM: type[Platform] = PackagePlatform

    def _views(p: Platform) -> tuple[PlatformChecks, PlatformPlan]:
        """The model's own views of a platform (schema.py, plan.py) are parts of this one."""
        return p, p
