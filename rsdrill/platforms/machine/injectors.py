"""Which injector carries out a fault on a member process of this machine (`platform: sandbox`
and `platform: local`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rsdrill.platforms.base import InjectionError, Injector
from rsdrill.platforms.machine.cgroup import CONTROLLERS, CgroupFault, settings_for
from rsdrill.platforms.machine.clock import ClockSkew
from rsdrill.platforms.machine.data_loss import DataLoss
from rsdrill.platforms.machine.disk import STORAGE_KINDS, PowerLossKill, StorageFault, rule_for
from rsdrill.platforms.machine.disk_fill import DiskFill
from rsdrill.platforms.machine.network import NetworkPartition
from rsdrill.platforms.machine.process import HostFreeze, HostKill

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
    if fault.kind == "clock-skew":
        if target.platform != "sandbox":
            raise InjectionError("clock-skew needs the sandbox's own clock (libfaketime for a "
                                 "local mongod is not wired in)")  # fmt: skip
        return ClockSkew(host, fault.clock_offset, fault.clock_drift)
    if fault.kind == "disk-fill":
        data = getattr(target, "small_disk", lambda _: None)(host)
        if data is None:
            raise InjectionError("disk-fill needs the sandbox's members on disks of their own")
        return DiskFill(hosts, host, data, fault.fill_percent,
                        hosts.restart_action(host, wipe=False))  # fmt: skip
    if fault.kind in CONTROLLERS:
        return CgroupFault(fault.kind, hosts, host,
                           settings_for(fault.kind, fault.cpu_share, fault.memory_limit_mb),
                           hosts.restart_action(host, wipe=False))  # fmt: skip
    if fault.kind == "network-partition":
        return NetworkPartition(
            hosts, host, list(target.members),
            isolate_from=fault.isolate_from, direction=fault.direction,
        )  # fmt: skip
    raise InjectionError(f"{fault.kind} is not available on this machine's members")


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
