"""The fault kinds: one module each (its model, check, revert rule and plan words, with its
`KindSpec`), the bottom of the experiment layer. `Fault` is their union: code that reads a
kind's own field narrows first (`if fault.kind == "host-kill":`), and mypy holds it to that.

Adding a kind: a module here, its class in `FAULT_CLASSES`, then an injector and its ways on
each platform that supports it (see docs/architecture.md).
"""

from __future__ import annotations

import typing
from typing import Union

from rsdrill.faults.base import (
    FaultBase,
    SelectCount,
    SelectDomain,
    Selection,
    SelectMember,
    SelectRouter,
    SelectShard,
    describe_selection,
)
from rsdrill.faults.clock_skew import ClockSkewFault
from rsdrill.faults.cpu_starve import CpuStarveFault
from rsdrill.faults.data_loss import DataLossFault
from rsdrill.faults.disk_fault import DiskFault
from rsdrill.faults.disk_fill import DiskFillFault
from rsdrill.faults.fail_command import FailCommandFault
from rsdrill.faults.host_freeze import HostFreezeFault
from rsdrill.faults.host_kill import HostKillFault, Restart
from rsdrill.faults.iops_throttle import IopsThrottleFault
from rsdrill.faults.memory_pressure import MemoryPressureFault
from rsdrill.faults.network_degrade import NetworkDegradeFault
from rsdrill.faults.network_partition import NetworkPartitionFault
from rsdrill.faults.spec import KindSpec
from rsdrill.faults.stepdown import StepdownFault
from rsdrill.faults.volume_detach import VolumeDetachFault
from rsdrill.faults.zone_outage import ZoneOutageFault

Fault = Union[  # noqa: UP007  # the order of the tables
    HostKillFault,
    HostFreezeFault,
    StepdownFault,
    FailCommandFault,
    ClockSkewFault,
    CpuStarveFault,
    MemoryPressureFault,
    DiskFillFault,
    DiskFault,
    IopsThrottleFault,
    VolumeDetachFault,
    NetworkPartitionFault,
    NetworkDegradeFault,
    ZoneOutageFault,
    DataLossFault,
]
"""A fault of any kind (validated from a file, its platform sections added: see
experiment/schema.py)."""

FAULT_CLASSES: dict[str, type[FaultBase]] = {cls.SPEC.kind: cls for cls in typing.get_args(Fault)}
"""Kind name → its model (without the platforms' sections), in the tables' order."""

KINDS: dict[str, KindSpec] = {kind: cls.SPEC for kind, cls in FAULT_CLASSES.items()}
KIND_NAMES: tuple[str, ...] = tuple(KINDS)

COMMAND_KINDS: tuple[str, ...] = tuple(k for k, spec in KINDS.items() if spec.way is not None)
"""Kinds carried out by a command to the member itself: the same on every platform (their one
`injector`), with no platform engine or API call."""


def own_fields(kind: str) -> tuple[str, ...]:
    """The fields of `kind` that not every fault has."""
    return tuple(n for n in FAULT_CLASSES[kind].model_fields if n not in FaultBase.model_fields)


def kinds_with_field(name: str) -> tuple[str, ...]:
    """The kinds `name` is a field of (empty: a field of every kind)."""
    return tuple(k for k in KINDS if name in own_fields(k))


def kind_only_fields() -> tuple[str, ...]:
    """Every field that belongs to some kinds only."""
    return tuple(dict.fromkeys(f for kind in KINDS for f in own_fields(kind)))


__all__ = [
    "COMMAND_KINDS",
    "FAULT_CLASSES",
    "KINDS",
    "KIND_NAMES",
    "ClockSkewFault",
    "CpuStarveFault",
    "DataLossFault",
    "DiskFault",
    "DiskFillFault",
    "FailCommandFault",
    "Fault",
    "FaultBase",
    "HostFreezeFault",
    "HostKillFault",
    "IopsThrottleFault",
    "KindSpec",
    "MemoryPressureFault",
    "NetworkDegradeFault",
    "NetworkPartitionFault",
    "Restart",
    "SelectCount",
    "SelectDomain",
    "SelectMember",
    "SelectRouter",
    "SelectShard",
    "Selection",
    "StepdownFault",
    "VolumeDetachFault",
    "ZoneOutageFault",
    "describe_selection",
]
