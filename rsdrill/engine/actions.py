"""Revert actions as the journal stores them, carried out without the run that wrote them.

Each action is idempotent: reverting what is already reverted does nothing, so `rsdrill
recover` can be run twice, or after a run that died halfway through its own rollback.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from rsdrill import registry
from rsdrill.engine.steps import stop_step
from rsdrill.experiment.schema import LocalMember
from rsdrill.faultfs.mount import FaultFSError, unmount_all
from rsdrill.platforms.base import RevertAction, TargetError
from rsdrill.platforms.local.target import LocalHosts, answers_hello
from rsdrill.platforms.machine.disk import clear as _faultfs_clear
from rsdrill.platforms.machine.network import heal as _network_heal
from rsdrill.redact import has_masked_password
from rsdrill.sandbox.cluster import Sandbox, SandboxError


def _sigcont(action: dict[str, Any]) -> str:
    try:
        os.kill(int(action["pid"]), signal.SIGCONT)
    except ProcessLookupError:
        return f"{action['host']}: process {action['pid']} is gone, nothing to resume"
    return f"{action['host']}: SIGCONT {action['pid']}"


def _sandbox_start(action: dict[str, Any]) -> str:
    sandbox = Sandbox(Path(action["dir"]))
    if not sandbox.exists():
        return f"{action['host']}: sandbox {action['dir']} is gone, nothing to restart"
    member = sandbox.spec.member(action["host"])
    if sandbox.pid(member) is not None:
        return f"{action['host']}: already running"
    sandbox.start(member, wipe=bool(action.get("wipe")))
    return f"{action['host']}: restarted"


def _local_start(action: dict[str, Any]) -> str:
    host = action["host"]
    if answers_hello(host):
        return f"{host}: already running"
    if has_masked_password(action["command"]):
        # The journal never holds a password: a command that had one cannot be rerun from it.
        raise TargetError(
            f"{host}: its start command held a password, masked in the journal; start it "
            f"yourself with the password in place: {action['command']}"
        )
    member = LocalMember(host=host, start=action["command"], dbpath=action.get("dbpath"))
    LocalHosts((member,), Path(action["log_dir"])).start(host, wipe=bool(action.get("wipe")))
    return f"{host}: restarted with `{action['command']}`"


def _sandbox_down(action: dict[str, Any]) -> str:
    sandbox = Sandbox(Path(action["dir"]))
    done = f"sandbox {action['dir']}: nothing running"
    if sandbox.running():
        pids = sandbox.down()
        done = f"sandbox {action['dir']}: stopped {len(pids)} member process(es)"
    # Members on faultfs (storage faults): their mounts go once the members are down.
    unmounted = unmount_all(Path(action["dir"]))
    return done + (f"; unmounted {len(unmounted)} faultfs volume(s)" if unmounted else "")


ACTIONS: dict[str, RevertAction] = {
    "stop-step": stop_step,
    "sigcont": _sigcont,
    "sandbox-start": _sandbox_start,
    "local-start": _local_start,
    "sandbox-down": _sandbox_down,
    "network-heal": _network_heal,
    "faultfs-clear": _faultfs_clear,
}


def _platform_action(name: str) -> RevertAction | None:
    """`ec2.start-instances` → the ec2 platform's handler (its SDK loads only now)."""
    platform = name.split(".", 1)[0]
    if not platform.isidentifier():
        return None
    if platform not in registry.platforms():
        # A journal written where a third-party platform was installed, read where it is not.
        raise TargetError(f"{name}: cannot load the {platform} platform: it is not installed")
    try:
        handlers = registry.platform(platform).revert_actions()
    except ModuleNotFoundError as exc:
        raise TargetError(f"{name}: cannot load the {platform} platform: {exc}") from exc
    return handlers.get(name)


def describe(action: dict[str, Any]) -> str:
    detail = ", ".join(f"{k}={v}" for k, v in action.items() if k != "action")
    return f"{action['action']} ({detail})"


def carry_out(action: dict[str, Any]) -> str:
    """Do one revert action; a line saying what was done. Raises TargetError on failure."""
    name = str(action.get("action", ""))
    handler = ACTIONS.get(name) if "." not in name else _platform_action(name)
    if handler is None:
        raise TargetError(f"unknown revert action {action!r}")
    try:
        return handler(action)
    except (SandboxError, FaultFSError, OSError, KeyError) as exc:
        raise TargetError(f"{describe(action)}: {exc}") from exc
