"""`stepdown`: replSetStepDown on the primary (any platform): a graceful hand-off, as in a
maintenance window. Nothing to revert: after the stepdown period the member may stand again."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from rsdrill.connection import ConnectOptions, DirectConnection, WireClientError
from rsdrill.faults import StepdownFault
from rsdrill.platforms.base import InjectionError, RunTarget

if TYPE_CHECKING:
    pass


class StepDown:
    kind = "stepdown"

    def __init__(
        self,
        target: str,
        *,
        period_s: float,
        catch_up_s: float,
        force: bool,
        options: ConnectOptions,
    ) -> None:
        self.target = target
        self.options = options
        self.period_s = period_s
        self.catch_up_s = catch_up_s
        self.force = force

    def describe(self) -> str:
        return (
            f"replSetStepDown {self.period_s:g}s on {self.target} "
            f"(secondaryCatchUpPeriodSecs {self.catch_up_s:g}{', force' if self.force else ''})"
        )

    def revert_action(self) -> dict[str, Any] | None:
        return None

    def inject(self) -> None:
        conn = DirectConnection(self.target, self.catch_up_s + 5, self.options)
        try:
            reply = conn.command(
                "admin",
                {
                    "replSetStepDown": self.period_s,
                    "secondaryCatchUpPeriodSecs": self.catch_up_s,
                    "force": self.force,
                },
            )
        except WireClientError as exc:
            # MongoDB before 4.2 closed connections on stepdown; the hello check decides.
            reply = {"ok": 1.0, "note": str(exc)}
        finally:
            conn.close()
        if not reply.get("ok"):
            raise InjectionError(f"replSetStepDown on {self.target}: {reply.get('errmsg')}")

    def verify(self, timeout_s: float) -> bool:
        conn = DirectConnection(self.target, 1.0, self.options)
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline:
                try:
                    if not conn.hello().get("isWritablePrimary"):
                        return True
                except WireClientError:
                    pass
                time.sleep(0.01)
            return False
        finally:
            conn.close()

    def revert(self) -> None:
        """Nothing: MongoDB itself lets the member stand again after the period."""


def injector(target: RunTarget, fault: StepdownFault, host: str) -> StepDown:
    """stepdown on any platform: the same command to the member, whatever hosts it."""
    return StepDown(host, period_s=fault.period, catch_up_s=fault.secondary_catch_up,
                    force=fault.force, options=target.connect_options)  # fmt: skip
