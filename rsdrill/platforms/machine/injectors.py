"""Which injector carries out a fault on a member process of this machine (`platform: sandbox`
and `platform: local`)."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import TYPE_CHECKING

from rsdrill.platforms.base import InjectionError, Injector
from rsdrill.platforms.machine.data_loss import DataLoss
from rsdrill.platforms.machine.degrade import Degradation, NetworkDegrade
from rsdrill.platforms.machine.disk import STORAGE_KINDS, PowerLossKill, StorageFault, rule_for
from rsdrill.platforms.machine.network import NetworkPartition
from rsdrill.platforms.machine.process import HostFreeze, HostKill
from rsdrill.platforms.machine.proxy import Shape

if TYPE_CHECKING:
    from rsdrill.experiment.schema import Fault
    from rsdrill.platforms.local.target import LocalTarget
    from rsdrill.platforms.sandbox.target import SandboxTarget


def machine_injector(fault: Fault, host: str, target: SandboxTarget | LocalTarget) -> Injector:
    """The injector for `fault` on the member `host` (stepdown is the runner's, not ours)."""
    hosts = target.hosts
    if fault.kind == "host-kill":
        restart = fault.restart is not False
        wipe = bool(fault.restart and fault.restart.volume == "wipe")
        action = hosts.restart_action(host, wipe=wipe)
        if fault.power_loss:
            return PowerLossKill(hosts, host, _faultfs(fault, host, target), restart=restart,
                                 wipe=wipe, restart_action=action)  # fmt: skip
        return HostKill(hosts, host, restart=restart, wipe=wipe, restart_action=action)
    if fault.kind in STORAGE_KINDS:
        return StorageFault(fault.kind, host, _faultfs(fault, host, target), rule_for(fault),
                            hosts.restart_action(host, wipe=False))  # fmt: skip
    if fault.kind == "host-freeze":
        return HostFreeze(hosts, host)
    if fault.kind == "data-loss":
        return DataLoss(hosts, host)
    if fault.kind == "network-partition":
        return NetworkPartition(
            hosts, host, list(target.members),
            isolate_from=fault.isolate_from, direction=fault.direction,
            shape=fault.shape, flapping=fault.flapping,
        )  # fmt: skip
    if fault.kind == "network-degrade":
        return NetworkDegrade(hosts, host, list(target.members), _degradation(fault),
                              seed=secrets.randbits(32))  # fmt: skip
    raise InjectionError(f"{fault.kind} is not available on this machine's members")


def _degradation(fault: Fault) -> Degradation:
    rate = fault.bandwidth_mbit_s
    shape = Shape(
        latency_s=fault.latency or 0.0,
        jitter_s=fault.jitter or 0.0,
        loss=fault.loss or 0.0,
        bandwidth_bytes_s=rate * 1e6 / 8 if rate else None,
    )
    return Degradation(shape, fault.between, fault.direction)


def _faultfs(fault: Fault, host: str, target: SandboxTarget | LocalTarget) -> Path:
    """The faultfs mount over the member's data directory, which storage faults act through."""
    mountpoint = target.faultfs_mountpoint(host)
    if mountpoint is None:
        what = "power_loss" if fault.kind == "host-kill" else fault.kind
        raise InjectionError(
            f"{what} on {host}: its data directory is not on faultfs "
            "(local members: mount it with `rsdrill faultfs mount` and give the member `faultfs`)"
        )
    return mountpoint
