"""Revert actions of the sandbox and local platforms as the journal names them (without a
platform prefix, as journals have always named them): resume, restart, stop a sandbox, heal a
partition, clear a faultfs rule. Each is idempotent, so `rsdrill recover` can run twice."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

from rsdrill.connection import SettingsError, action_options, carried
from rsdrill.experiment.target import LocalMember
from rsdrill.faultfs.control import ControlError, request
from rsdrill.faultfs.mirror import IN_SYNC, resync_offline
from rsdrill.faultfs.mount import unmount_all
from rsdrill.platforms.base import RevertAction, TargetError
from rsdrill.platforms.machine.cgroup import leave
from rsdrill.platforms.machine.clock import clock_reset
from rsdrill.platforms.machine.degrade import undegrade
from rsdrill.platforms.machine.disk_fill import free, unmount_small_disks
from rsdrill.platforms.machine.faketime import reset as faketime_reset
from rsdrill.platforms.machine.local_hosts import LocalHosts
from rsdrill.platforms.machine.network import heal
from rsdrill.redact import has_masked_password
from rsdrill.sandbox.cluster import Sandbox
from rsdrill.sandbox.config import CLUSTER_FILE
from rsdrill.sandbox.errors import SandboxError
from rsdrill.sandbox.sharded import ShardedSandbox


def _sigcont(action: dict[str, Any]) -> str:
    try:
        os.kill(int(action["pid"]), signal.SIGCONT)
    except ProcessLookupError:
        return f"{action['host']}: process {action['pid']} is gone, nothing to resume"
    return f"{action['host']}: SIGCONT {action['pid']}"


def _journaled_path(action: dict[str, Any], key: str) -> Path:
    """A path the action journaled (a sandbox's `dir`, a faultfs `mountpoint`, a filler's
    `path`). A relative one (journaled by rsdrill before it wrote them absolute) is the run's
    working directory's: from anywhere else it is missing, and a missing one would be taken for
    a fault already gone (a sandbox stopped, a mount gone, a filler deleted) while it holds."""
    path = Path(action[key])
    if not path.is_absolute() and not path.exists():
        raise TargetError(f"{action['action']} {path}: not found from {Path.cwd()}: the run "
                          "journaled it relative to the directory it was started in; run "
                          "`rsdrill recover` there")  # fmt: skip
    return path


def _sandbox_dir(action: dict[str, Any]) -> Path:
    return _journaled_path(action, "dir")


def _sandbox_start(action: dict[str, Any]) -> str:
    sandbox = Sandbox(_sandbox_dir(action))
    if not sandbox.exists():
        return f"{action['host']}: sandbox {action['dir']} is gone, nothing to restart"
    member = sandbox.spec.member(action["host"])
    if sandbox.pid(member) is not None:
        return f"{action['host']}: already running"
    sandbox.start(member, wipe=bool(action.get("wipe")))
    return f"{action['host']}: restarted"


def _local_start(action: dict[str, Any]) -> str:
    host = action["host"]
    # Asked with the journaled TLS settings (hello needs no login).
    try:
        options = action_options(action, login=False)
    except SettingsError as exc:
        raise TargetError(f"{host}: not restarted: {exc}") from exc
    member = LocalMember(host=host, start=action["command"], dbpath=action.get("dbpath"))
    # clock-skew runs: restarted under libfaketime, reading the same offset file.
    clock = {host: Path(action["clock_file"])} if action.get("clock_file") else None
    cwd = Path(action["cwd"]) if action.get("cwd") else None
    hosts = LocalHosts((member,), Path(action["log_dir"]), options, clock, cwd)
    # Up, down, or (TargetError) a frozen process holding its port: first, so that one is not
    # told to start it by hand (a masked password) nor refused for a relative dbpath.
    if hosts.is_up(host):
        return f"{host}: already running"
    if has_masked_password(action["command"]):
        # The journal never holds a password: a command that had one cannot be rerun from it.
        raise TargetError(
            f"{host}: its start command held a password, masked in the journal; start it "
            f"yourself with the password in place: {action['command']}"
        )
    relative = member.dbpath is not None and not Path(member.dbpath).is_absolute()
    if relative and action.get("wipe") and "cwd" not in action:
        # Journaled before the run's directory was: a relative dbpath read from here could be
        # another directory, and a wipe would empty it.
        raise TargetError(f"{host}: not restarted: its dbpath {member.dbpath} is relative "
                          "to the directory the run was started in; run `rsdrill recover` "
                          "there")  # fmt: skip
    hosts.start(host, wipe=bool(action.get("wipe")))
    return f"{host}: restarted with `{action['command']}`"


def _local_start_each(action: dict[str, Any]) -> str:
    """Resource action `local-start-each`: every member that does not answer started again
    (a run died while restarting the members under libfaketime). Each is tried whatever the
    ones before did: one member that cannot be started must not leave the others down. Any
    failure keeps the action owed; its retry finds the started ones answering."""
    done: list[str] = []
    failed: list[str] = []
    for start in action["starts"]:
        try:
            done.append(_local_start(carried(start, action)))
        except TargetError as exc:
            failed.append(str(exc))
    if failed:
        raise TargetError("; ".join(failed + done))
    return "; ".join(done)


def _sandbox_router_start(action: dict[str, Any]) -> str:
    directory, host = _sandbox_dir(action), action["host"]
    if not (directory / CLUSTER_FILE).exists():
        return f"{host}: sandbox {directory} is gone, nothing to restart"
    try:
        started = ShardedSandbox(directory).restart_router(host)
    except SandboxError as exc:
        raise TargetError(f"{host}: not restarted: {exc}") from exc
    return f"{host}: restarted" if started else f"{host}: already running"


def _sandbox_down(action: dict[str, Any]) -> str:
    directory = _sandbox_dir(action)
    if (directory / CLUSTER_FILE).exists():
        pids = ShardedSandbox(directory).down()
        return f"sharded sandbox {directory}: stopped {len(pids)} process(es)"
    sandbox = Sandbox(directory)
    done = f"sandbox {directory}: nothing running"
    if sandbox.running():
        pids = sandbox.down()
        done = f"sandbox {directory}: stopped {len(pids)} member process(es)"
    # Members on faultfs (storage faults): their mounts go once the members are down.
    unmounted = unmount_all(directory)
    small = unmount_small_disks(directory)  # disk-fill: the members' own disks
    done += f"; unmounted {len(unmounted)} faultfs volume(s)" if unmounted else ""
    return done + (f"; unmounted {len(small)} member disk(s)" if small else "")


# How long a revert waits for a copy of mirrored data to be resynced (the sandbox's data take
# well under a second; the member is served all along, only the run's schedule waits).
RESYNC_WAIT_S = 120.0


def faultfs_clear(action: dict[str, Any]) -> str:
    """Revert action `faultfs-clear`: drop the rule; restart the member if it died meanwhile.
    A rule on one copy of mirrored data (`mirror`): wait for the mount to resync that copy, or
    resync it here when the mount is gone."""
    return faultfs_clear_counted(action)[0]


def faultfs_clear_counted(action: dict[str, Any]) -> tuple[str, dict[str, int]]:
    """`faultfs_clear`, and the rule's hits as its clear counted them, to its last operation
    (none when the mount is gone, or its daemon, of an older rsdrill, does not count them)."""
    host, mountpoint, rule = action["host"], _journaled_path(action, "mountpoint"), action["rule"]
    hits: dict[str, int] = {}
    try:
        reply = request(mountpoint, {"op": "clear", "name": rule})
        done = f"{host}: {rule} cleared" if reply["cleared"] else f"{host}: no rule to clear"
        hits = {k: int(v) for k, v in reply.get("rule_hits", {}).get(rule, {}).items()}
    except ControlError:
        done = f"{host}: faultfs no longer mounted, nothing to clear"
    if action.get("mirror"):
        done += f"; {_resynced(mountpoint, action['mirror'])}"
    restart = action.get("restart")
    if restart:  # restart actions do nothing when the member still runs
        done += f"; {REVERT_ACTIONS[restart['action']](carried(restart, action))}"
    return done, hits


def _resynced(mountpoint: Path, mirror: dict[str, Any]) -> str:
    """Wait for the mount to resync the cleared copy; resync it offline if the mount is gone."""
    replica, deadline = mirror["replica"], time.monotonic() + RESYNC_WAIT_S
    while time.monotonic() < deadline:
        try:
            state = request(mountpoint, {"op": "status"})["replicas"][replica]
        except ControlError:
            done = resync_offline(Path(mirror["record"]))
            return "; ".join(done) + " (offline)" if done else f"replica {replica} in sync"
        if state["state"] == IN_SYNC:
            resync = (state["resyncs"] or [{}])[-1]
            return f"replica {replica} in sync" + (
                f" (resynced in {resync['seconds']:g} s)" if resync else ""
            )
        time.sleep(0.05)
    return f"replica {replica} still resyncing after {RESYNC_WAIT_S:g} s (the mount goes on)"


def _cgroup_leave(action: dict[str, Any]) -> str:
    """Revert action `cgroup-leave`: the member out of its cpu/memory cgroup; restarted if the
    OOM killer took it meanwhile."""
    done = leave(action)
    restart = action.get("restart")
    if restart:  # restart actions do nothing when the member still runs
        done += f"; {REVERT_ACTIONS[restart['action']](carried(restart, action))}"
    return done


def _disk_fill_free(action: dict[str, Any]) -> str:
    """Revert action `disk-fill-free`: the filler deleted; the member restarted if it died."""
    done = free({**action, "path": str(_journaled_path(action, "path"))})
    restart = action.get("restart")
    if restart:
        done += f"; {REVERT_ACTIONS[restart['action']](carried(restart, action))}"
    return done


REVERT_ACTIONS: dict[str, RevertAction] = {
    "sigcont": _sigcont,
    "sandbox-start": _sandbox_start,
    "local-start": _local_start,
    "local-start-each": _local_start_each,
    "sandbox-router-start": _sandbox_router_start,
    "sandbox-down": _sandbox_down,
    "network-heal": heal,
    "network-undegrade": undegrade,
    "faultfs-clear": faultfs_clear,
    "cgroup-leave": _cgroup_leave,
    "clock-reset": clock_reset,
    "faketime-reset": faketime_reset,
    "disk-fill-free": _disk_fill_free,
}
