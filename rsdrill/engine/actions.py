"""Revert actions as the journal stores them, carried out without the run that wrote them.

Each action is idempotent: reverting what is already reverted does nothing, so `rsdrill
recover` can be run twice, or after a run that died halfway through its own rollback.
"""

from __future__ import annotations

from typing import Any

from rsdrill.connection import GIVEN_OPTIONS, ConnectOptions
from rsdrill.engine.balancer import REVERT_ACTION as BALANCER_START
from rsdrill.engine.balancer import balancer_start
from rsdrill.engine.forced_reconfig import REVERT_ACTION as RE_ADD
from rsdrill.engine.forced_reconfig import re_add
from rsdrill.engine.steps import stop_step
from rsdrill.faultfs.mount import FaultFSError
from rsdrill.platforms.base import RevertAction, TargetError, platforms
from rsdrill.platforms.command.fail_command import REVERT_ACTION as FAIL_COMMAND_OFF
from rsdrill.platforms.command.fail_command import fail_command_off
from rsdrill.platforms.machine.actions import REVERT_ACTIONS as MACHINE_ACTIONS
from rsdrill.sandbox.errors import SandboxError

# The machine platforms' actions carry no platform prefix (journals name them so).
ACTIONS: dict[str, RevertAction] = {
    "stop-step": stop_step,
    FAIL_COMMAND_OFF: fail_command_off,  # a command, the same on every platform
    BALANCER_START: balancer_start,  # guards.stop_balancer: through the cluster's routers
    RE_ADD: re_add,  # recovery.force_reconfig: the members it left out, added back
    **MACHINE_ACTIONS,
}


def _platform_action(name: str) -> RevertAction | None:
    """`ec2.start-instances` → the ec2 platform's handler (its SDK loads only now)."""
    platform = name.split(".", 1)[0]
    if not platform.isidentifier():
        return None
    if platform not in platforms():
        # A journal written where a third-party platform was installed, read where it is not.
        raise TargetError(f"{name}: cannot load the {platform} platform: it is not installed")
    try:
        handlers = platforms()[platform].revert_actions()
    except ModuleNotFoundError as exc:
        raise TargetError(f"{name}: cannot load the {platform} platform: {exc}") from exc
    return handlers.get(name)


def describe(action: dict[str, Any]) -> str:
    """The action and what it acts on, in one line: not how the member is reached (`connect`,
    the journaled TLS and login settings, a mapping a reader has no use for)."""
    detail = ", ".join(f"{k}={v}" for k, v in action.items()
                       if k not in ("action", "connect", GIVEN_OPTIONS))  # fmt: skip
    return f"{action['action']} ({detail})"


def carry_out(action: dict[str, Any], given: ConnectOptions | None = None) -> str:
    """Do one revert action; a line saying what was done. Raises TargetError on failure.
    `given`: the settings to reach the members with (`rsdrill recover --uri`), instead of
    those journaled with the action, which hold no secret."""
    if given is not None:
        action = {**action, GIVEN_OPTIONS: given}
    name = str(action.get("action", ""))
    handler = ACTIONS.get(name) if "." not in name else _platform_action(name)
    if handler is None:
        raise TargetError(f"unknown revert action {action!r}")
    try:
        return handler(action)
    except (SandboxError, FaultFSError, OSError, KeyError) as exc:
        raise TargetError(f"{describe(action)}: {exc}") from exc
