"""`mongodb-fail-command`: MongoDB's own `failCommand` fail point on a member (any platform).

The member answers the named commands with an error code, holds them, or drops the connection,
until the fail point is set back to mode `off` (or it has fired `times` times). A real mongod
accepts `configureFailPoint` only when started with `enableTestCommands=1` (`rsdrill check`
asks `getParameter` first). A restarted member has no fail point: nothing survives a restart.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rsdrill.connection import (
    ConnectOptions,
    DirectConnection,
    SettingsError,
    WireClientError,
    action_options,
    member_down,
)
from rsdrill.faults import FailCommandFault
from rsdrill.platforms.base import InjectionError, RunTarget, TargetError

if TYPE_CHECKING:
    pass

KIND = "mongodb-fail-command"
REVERT_ACTION = "fail-command-off"
TIMEOUT_S = 5.0
COMMAND_NOT_FOUND = 59


def fail_point_data(fault: FailCommandFault) -> dict[str, Any]:
    """The `data` document of configureFailPoint failCommand for this fault."""
    data: dict[str, Any] = {"failCommands": list(fault.commands)}
    if fault.error_code is not None:
        data["errorCode"] = fault.error_code
    if fault.error_labels is not None:
        data["errorLabels"] = list(fault.error_labels)
    if fault.close_connection:
        data["closeConnection"] = True
    if fault.block_time is not None:
        data["blockConnection"] = True
        data["blockTimeMS"] = round(fault.block_time * 1000)
    if fault.app_name is not None:
        data["appName"] = fault.app_name
    return data


def _configure(
    host: str, options: ConnectOptions, mode: Any, data: dict[str, Any] | None = None
) -> None:
    body: dict[str, Any] = {"configureFailPoint": "failCommand", "mode": mode}
    if data is not None:
        body["data"] = data
    conn = DirectConnection(host, TIMEOUT_S, options)
    try:
        reply = conn.command("admin", body)
    except WireClientError as exc:
        reason = str(exc).removeprefix(f"{host}: ")  # the member is named once
        raise InjectionError(f"configureFailPoint on {host}: {reason}") from exc
    finally:
        conn.close()
    if not reply.get("ok"):
        # CommandNotFound: a mongod started without test commands.
        hint = " (start mongod with --setParameter enableTestCommands=1)"
        hint = hint if reply.get("code") == COMMAND_NOT_FOUND else ""
        raise InjectionError(f"configureFailPoint on {host}: {reply.get('errmsg')}{hint}")


class FailCommand:
    kind = KIND

    def __init__(self, target: str, fault: FailCommandFault, options: ConnectOptions) -> None:
        self.target = target
        self.options = options
        self.data = fail_point_data(fault)
        self.mode: Any = {"times": fault.times} if fault.times is not None else "alwaysOn"

    def describe(self) -> str:
        what = ", ".join(f"{k}={v}" for k, v in self.data.items() if k != "failCommands")
        return (
            f"failCommand on {self.target}: {'/'.join(self.data['failCommands'])} ({what}), "
            f"mode {self.mode}"
        )

    def revert_action(self) -> dict[str, Any] | None:
        return {"action": REVERT_ACTION, "host": self.target, "connect": self.options.journaled()}

    def inject(self) -> None:
        _configure(self.target, self.options, self.mode, self.data)

    def verify(self, timeout_s: float) -> bool:
        """The member accepted the fail point (configureFailPoint answered ok)."""
        return True

    def revert(self) -> None:
        try:
            _configure(self.target, self.options, "off")
        except InjectionError:
            if member_down(self.target, 1.0, options=self.options):
                return  # a member that is down (or restarted) holds no fail point
            raise


def fail_command_off(action: dict[str, Any]) -> str:
    """Revert action `fail-command-off`: the member's failCommand back to mode off."""
    host = action["host"]
    # With the journaled TLS settings: a member that would not talk plain is not a member down.
    try:
        if member_down(host, 1.0, options=action_options(action, login=False)):
            return f"{host}: not running, no fail point survives a restart"
        _configure(host, action_options(action, login=True), "off")
    except (InjectionError, SettingsError) as exc:
        raise TargetError(f"{host}: failCommand may still be on: {exc}") from exc
    return f"{host}: failCommand off"


def injector(target: RunTarget, fault: FailCommandFault, host: str) -> FailCommand:
    """mongodb-fail-command on any platform: the same command to the member, whatever hosts it."""
    return FailCommand(host, fault, target.connect_options)
