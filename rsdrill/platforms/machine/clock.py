"""`clock-skew` on a sandbox member: its wall clock moved by `clock_offset` seconds (and
`clock_drift` seconds per second) through the emulator's own control command, then set back.

What the skew changes on the member is listed in `rsdrill/sandbox/emulator/wallclock.py`. A
mongod of `platform: local` would need libfaketime in its environment at start: refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rsdrill.connection import ConnectOptions, DirectConnection, WireClientError
from rsdrill.platforms.base import InjectionError, Injector, MachineTarget, TargetError

if TYPE_CHECKING:
    from rsdrill.experiment.schema import Fault

TIMEOUT_S = 5.0


def _skew(host: str, offset_s: float, drift: float, options: ConnectOptions) -> float:
    conn = DirectConnection(host, TIMEOUT_S, options)
    try:
        reply = conn.command("admin", {"rsdrillClockSkew": offset_s, "drift": drift})
    except WireClientError as exc:
        raise InjectionError(f"clock-skew on {host}: {exc}") from exc
    finally:
        conn.close()
    if not reply.get("ok"):
        raise InjectionError(f"clock-skew on {host}: {reply.get('errmsg')}")
    return float(reply.get("skewSeconds", 0.0))


def clock_reset(action: dict[str, Any]) -> str:
    """Revert action `clock-reset`: the member's clock back to real time."""
    host = action["host"]
    # The journal holds no connection settings (no secret is ever written there).
    plain = ConnectOptions()
    conn = DirectConnection(host, 1.0, plain)
    try:
        conn.hello()
    except WireClientError:
        return f"{host}: not reachable (a restarted member's clock is real time)"
    finally:
        conn.close()
    try:
        _skew(host, 0.0, 0.0, plain)
    except InjectionError as exc:
        raise TargetError(str(exc)) from exc
    return f"{host}: clock back to real time"


class ClockSkew:
    kind = "clock-skew"

    def __init__(self, host: str, offset_s: float, drift: float, options: ConnectOptions) -> None:
        self.target = host
        self.offset_s = offset_s
        self.drift = drift
        self.options = options

    def describe(self) -> str:
        drift = f", drifting {self.drift:+g} s/s" if self.drift else ""
        return f"{self.target}'s clock {self.offset_s:+g}s{drift}"

    def revert_action(self) -> dict[str, Any] | None:
        return {"action": "clock-reset", "host": self.target}

    def inject(self) -> None:
        _skew(self.target, self.offset_s, self.drift, self.options)

    def verify(self, timeout_s: float) -> bool:
        """The member accepted the skew (its command answered ok)."""
        return True

    def revert(self) -> None:
        try:
            _skew(self.target, 0.0, 0.0, self.options)
        except InjectionError:
            conn = DirectConnection(self.target, 1.0, self.options)
            try:
                conn.hello()
            except WireClientError:
                return  # down: it restarts on real time
            finally:
                conn.close()
            raise


def clock_skew(target: MachineTarget, fault: Fault, host: str) -> Injector:
    """clock-skew of a member: the sandbox emulator's own clock (a local mongod has none to set)."""
    if getattr(target, "platform", None) != "sandbox":
        raise InjectionError("clock-skew needs the sandbox's own clock (libfaketime for a "
                             "local mongod is not wired in)")  # fmt: skip
    return ClockSkew(host, fault.clock_offset, fault.clock_drift, target.connect_options)
