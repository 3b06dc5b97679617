"""Storage faults on this machine (`platform: sandbox` and `platform: local`), through the
fault-injecting filesystem mounted over a member's data directory (`rsdrill/faultfs/`):

- disk-fault: an errno on a share of reads, writes, fsyncs or opens, optionally only for paths
  matching a glob, and/or latency added to them; with `replica`, on one copy of a mirrored
  sandbox member's data only (the mount masks it, and resyncs the copy on revert);
- iops-throttle: IOPS and bandwidth caps (token buckets), separate for reads and writes;
- volume-detach: every operation fails with EIO at once, as when the volume vanishes;
- host-kill with `power_loss: true`: after the SIGKILL, writes not yet fsynced are dropped.

Each fault is one named rule in the mount's daemon; the revert action (journaled before the
rule is set) clears that rule and restarts the member if the fault killed it, as a supervisor
(systemd's Restart=on-failure) would once the storage is healthy again.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rsdrill.faultfs.control import ControlError, request
from rsdrill.faultfs.rules import Rule, RuleError
from rsdrill.platforms.base import InjectionError, ProcessHosts, TargetError
from rsdrill.platforms.machine.actions import faultfs_clear_counted
from rsdrill.platforms.machine.process import HostKill

if TYPE_CHECKING:
    from rsdrill.experiment.schema import Fault
    from rsdrill.faults import HostKillFault
    from rsdrill.faults.host_kill import Restart
    from rsdrill.platforms.base import Injector, MachineTarget

_MIB = 1024 * 1024


def rule_for(fault: Fault) -> Rule:
    """The faultfs rule that carries out a storage fault."""
    try:
        if fault.kind == "volume-detach":
            return Rule(detach=True)
        if fault.kind == "iops-throttle":
            return Rule(
                operations=("any",),
                latency_s=fault.latency or 0.0,
                iops=fault.iops,
                read_iops=fault.read_iops,
                write_iops=fault.write_iops,
                bytes_per_s=_bytes(fault.throughput_mb_s),
                read_bytes_per_s=_bytes(fault.read_mb_s),
                write_bytes_per_s=_bytes(fault.write_mb_s),
            )
        if fault.kind == "disk-fault":
            return Rule(
                errno=None if fault.errno == "none" else fault.errno,
                operations=tuple(fault.operations),
                probability=fault.probability,
                path=fault.path,
                latency_s=fault.latency or 0.0,
                replica=fault.replica,
            )
    except RuleError as exc:
        raise InjectionError(f"{fault.kind}: {exc}") from exc
    raise InjectionError(f"{fault.kind} is not a storage fault")


def _bytes(mib_per_s: float | None) -> float | None:
    return None if mib_per_s is None else mib_per_s * _MIB


def describe_rule(rule: Rule) -> str:
    if rule.detach:
        return "every operation fails with EIO (volume detached)"
    parts = []
    if rule.errno:
        share = "" if rule.probability == 1 else f"{rule.probability:.0%} of "
        where = f" on {rule.path}" if rule.path else ""
        parts.append(f"{rule.errno} on {share}{'/'.join(rule.operations)}{where}")
    if rule.latency_s:
        parts.append(f"+{rule.latency_s * 1000:g} ms per operation")
    caps = {
        "IOPS": rule.iops, "read IOPS": rule.read_iops, "write IOPS": rule.write_iops,
        "MiB/s": rule.bytes_per_s and rule.bytes_per_s / _MIB,
        "read MiB/s": rule.read_bytes_per_s and rule.read_bytes_per_s / _MIB,
        "write MiB/s": rule.write_bytes_per_s and rule.write_bytes_per_s / _MIB,
    }  # fmt: skip
    parts += [f"{value:g} {name}" for name, value in caps.items() if value]
    return ", ".join(parts) or "no effect"


class StorageFault:
    """One faultfs rule on one member's data directory (disk-fault, iops-throttle,
    volume-detach)."""

    def __init__(self, kind: str, target: str, mountpoint: Path, rule: Rule,
                 restart_action: dict[str, Any] | None,
                 mirror_record: str | None = None) -> None:  # fmt: skip
        self.kind = kind
        self.target = target
        self.mountpoint = mountpoint
        self.rule = rule
        self.name = f"{kind}-{secrets.token_hex(4)}"
        self._restart_action = restart_action
        self._mirror_record = mirror_record
        self._hits: dict[str, int] = {}
        self._replica: dict[str, Any] = {}

    def describe(self) -> str:
        copy = f" replica {self.rule.replica}" if self.rule.replica else ""
        return (f"{self.kind} on {self.target} ({self.mountpoint}{copy}): "
                f"{describe_rule(self.rule)}")  # fmt: skip

    def revert_action(self) -> dict[str, Any] | None:
        action = {
            "action": "faultfs-clear",
            "host": self.target,
            "mountpoint": str(self.mountpoint),
            "rule": self.name,
            "restart": self._restart_action,
        }
        if self.rule.replica is not None:  # resynced once cleared: waited for, also offline
            action["mirror"] = {"replica": self.rule.replica, "record": self._mirror_record}
        return action

    def inject(self) -> None:
        try:
            message = {"op": "set", "name": self.name, "rule": self.rule.to_dict()}
            unreached = request(self.mountpoint, message).get("unreached") or []
            if unreached:  # a mount with passthrough: the fault would miss these files
                request(self.mountpoint, {"op": "clear", "name": self.name})
        except ControlError as exc:
            raise InjectionError(f"{self.kind} {self.target}: {exc}") from exc
        if unreached:
            raise InjectionError(
                f"{self.kind} {self.target}: {self.mountpoint} passes {', '.join(unreached)} "
                "straight to the disk (FUSE passthrough, opened before the fault): the fault "
                "could not reach them; mount it without passthrough"
            )

    def verify(self, timeout_s: float) -> bool:
        """The daemon reports the rule active."""
        try:
            status = request(self.mountpoint, {"op": "status"}, timeout_s=max(timeout_s, 0.5))
        except ControlError:
            return False
        return self.name in status.get("rules", {})

    def revert(self) -> None:
        # The hits from the clear itself: a status read before it missed those in between.
        try:
            _, self._hits = faultfs_clear_counted(self.revert_action() or {})
        except TargetError as exc:
            raise InjectionError(str(exc)) from exc
        if self.rule.replica is not None:
            try:
                replicas = request(self.mountpoint, {"op": "status"})["replicas"]
                self._replica = {"name": self.rule.replica, **replicas[self.rule.replica]}
            except ControlError:
                self._replica = {"name": self.rule.replica, "state": "mount gone"}

    def report(self) -> dict[str, Any]:
        """For the result: operations the rule matched, failed and slowed while it was set;
        for one copy of mirrored data, that copy's state after the revert: when it was
        degraded, and its resync (seconds, bytes and files copied, how long writes were held)."""
        if not self._replica:
            return {"operations": self._hits}
        resyncs = self._replica.get("resyncs") or [None]
        replica = {k: v for k, v in self._replica.items() if k != "resyncs"}
        return {"operations": self._hits, "replica": {**replica, "resync": resyncs[-1]}}


class PowerLossKill(HostKill):
    """host-kill with `power_loss: true`: SIGKILL, then drop what the member wrote but did not
    fsync (the undo records of its faultfs mount) before it can be restarted."""

    def __init__(self, hosts: ProcessHosts, target: str, mountpoint: Path, *, restart: bool,
                 wipe: bool, restart_action: dict[str, Any] | None,
                 ha: Restart | None = None) -> None:  # fmt: skip
        super().__init__(hosts, target, restart=restart, wipe=wipe, restart_action=restart_action,
                         ha=ha)  # fmt: skip
        self.mountpoint = mountpoint
        self.undone: dict[str, int] = {}

    def describe(self) -> str:
        return super().describe().replace("SIGKILL", "power off (SIGKILL, unsynced writes lost)", 1)

    def inject(self) -> None:
        super().inject()
        try:
            self.undone = request(self.mountpoint, {"op": "power-loss"})["undone"]
        except ControlError as exc:
            raise InjectionError(f"power loss on {self.target}: {exc}") from exc

    def report(self) -> dict[str, Any]:
        """For the result: per file, the unsynced bytes dropped (-1: a new file removed)."""
        return {**super().report(), "unsynced_dropped": self.undone}


def _faultfs(target: MachineTarget, fault: Fault, host: str) -> Path:
    """The faultfs mount over the member's data directory, which storage faults act through."""
    mountpoint = target.faultfs_mountpoint(host)
    if mountpoint is None:
        what = "power_loss" if fault.kind == "host-kill" else fault.kind
        raise InjectionError(
            f"{what} on {host}: its data directory is not on faultfs "
            "(local members: mount it with `rsdrill faultfs mount` and give the member `faultfs`)"
        )
    return mountpoint


def _mirror_record(mountpoint: Path, replica: str, host: str) -> str:
    """Where the mirrored mount keeps its replicas' states (refused: a mount with one copy)."""
    try:
        record = request(mountpoint, {"op": "ping"}).get("mirror_record")
    except ControlError as exc:
        raise InjectionError(f"disk-fault {host}: {exc}") from exc
    if not record:
        raise InjectionError(f"disk-fault replica {replica} on {host}: its data directory is "
                             "not mirrored (target.sandbox.mirror)")  # fmt: skip
    return str(record)


def storage_fault(target: MachineTarget, fault: Fault, host: str) -> StorageFault:
    """disk-fault, iops-throttle and volume-detach on a member process: a faultfs rule."""
    mountpoint, rule = _faultfs(target, fault, host), rule_for(fault)
    record = None if rule.replica is None else _mirror_record(mountpoint, rule.replica, host)
    return StorageFault(fault.kind, host, mountpoint, rule,
                        target.hosts.restart_action(host, wipe=False), record)  # fmt: skip


def host_kill(target: MachineTarget, fault: HostKillFault, host: str) -> Injector:
    """host-kill of a member process: SIGKILL, and with `power_loss` its unsynced writes
    dropped through faultfs (hence here, next to the other faultfs faults)."""
    restart = fault.restart is not False
    wipe = fault.wiped_on_restart
    action = target.hosts.restart_action(host, wipe=wipe)
    ha = fault.ha_restart
    if fault.power_loss:
        return PowerLossKill(target.hosts, host, _faultfs(target, fault, host), restart=restart,
                             wipe=wipe, restart_action=action, ha=ha)  # fmt: skip
    return HostKill(target.hosts, host, restart=restart, wipe=wipe, restart_action=action, ha=ha)
