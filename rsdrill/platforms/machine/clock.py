"""`clock-skew` on a sandbox or local member: its wall clock moved by `clock_offset` seconds,
then set back. A sandbox member's through the emulator's own control command (with
`clock_drift` seconds per second); a local member's through libfaketime, which the run started
it under (`faketime.py`; no drift, refused at load).

What the skew changes on an emulated member is listed in `rsdrill_emulator/wallclock.py`.
"""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rsdrill.connection import (
    ConnectOptions,
    DirectConnection,
    SettingsError,
    WireClientError,
    action_options,
    member_down,
)
from rsdrill.platforms.base import InjectionError, Injector, MachineTarget, TargetError
from rsdrill.platforms.machine import faketime

if TYPE_CHECKING:
    from rsdrill.faults import ClockSkewFault

TIMEOUT_S = 5.0
# How far the member's clock may read from the skew asked for: a hello's round trip and the
# emulator's millisecond clock, with room for a loaded machine.
VERIFY_TOLERANCE_S = 1.0


def clock_error(host: str, offset_s: float, options: ConnectOptions) -> float | None:
    """How far `host`'s own clock (hello's localTime) is from real time + `offset_s`, in
    seconds; None when it does not answer."""
    conn = DirectConnection(host, 1.0, options)
    try:
        local = conn.hello().get("localTime")
    except WireClientError:
        return None
    finally:
        conn.close()
    if not isinstance(local, dt.datetime):
        return None
    if local.tzinfo is None:  # BSON dates decode as naive UTC
        local = local.replace(tzinfo=dt.UTC)
    return local.timestamp() - time.time() - offset_s


def _skew(host: str, offset_s: float, drift: float, options: ConnectOptions) -> float:
    conn = DirectConnection(host, TIMEOUT_S, options)
    try:
        reply = conn.command("admin", {"rsdrillClockSkew": offset_s, "drift": drift})
    except WireClientError as exc:
        reason = str(exc).removeprefix(f"{host}: ")  # the member is named once
        raise InjectionError(f"clock-skew on {host}: {reason}") from exc
    finally:
        conn.close()
    if not reply.get("ok"):
        raise InjectionError(f"clock-skew on {host}: {reply.get('errmsg')}")
    return float(reply.get("skewSeconds", 0.0))


def clock_reset(action: dict[str, Any]) -> str:
    """Revert action `clock-reset`: the member's clock back to real time."""
    host = action["host"]
    try:
        if member_down(host, 1.0, options=action_options(action, login=False)):
            return f"{host}: not running (a restarted member's clock is real time)"
        _skew(host, 0.0, 0.0, action_options(action, login=True))
    except (InjectionError, SettingsError) as exc:
        raise TargetError(f"{host}: its clock may still be skewed: {exc}") from exc
    return f"{host}: clock back to real time"


class ClockSkew:
    kind = "clock-skew"

    def __init__(self, host: str, offset_s: float, drift: float, options: ConnectOptions) -> None:
        self.target = host
        self.offset_s = offset_s
        self.drift = drift
        self._injected_at = 0.0
        self.options = options

    def describe(self) -> str:
        drift = f", drifting {self.drift:+g} s/s" if self.drift else ""
        return f"{self.target}'s clock {self.offset_s:+g}s{drift}"

    def revert_action(self) -> dict[str, Any] | None:
        return {"action": "clock-reset", "host": self.target, "connect": self.options.journaled()}

    def inject(self) -> None:
        self._injected_at = time.monotonic()
        _skew(self.target, self.offset_s, self.drift, self.options)

    def verify(self, timeout_s: float) -> bool:
        """The member's own clock reads real time + the offset (+ the drift so far)."""
        deadline = time.monotonic() + timeout_s
        while True:
            expected = self.offset_s + self.drift * (time.monotonic() - self._injected_at)
            error = clock_error(self.target, expected, self.options)
            if error is not None and abs(error) <= VERIFY_TOLERANCE_S:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)

    def revert(self) -> None:
        try:
            _skew(self.target, 0.0, 0.0, self.options)
        except InjectionError:
            if member_down(self.target, 1.0, options=self.options):
                return  # it restarts on real time
            raise


class FaketimeClockSkew(ClockSkew):
    """A local member's clock through the libfaketime offset file it was started with."""

    def __init__(self, host: str, offset_s: float, offset_file: Path,
                 options: ConnectOptions) -> None:  # fmt: skip
        super().__init__(host, offset_s, 0.0, options)
        self.offset_file = offset_file

    def describe(self) -> str:
        return f"{super().describe()} (libfaketime, {self.offset_file})"

    def revert_action(self) -> dict[str, Any] | None:
        return {"action": "faketime-reset", "host": self.target, "file": str(self.offset_file)}

    def inject(self) -> None:
        self._injected_at = time.monotonic()
        try:
            faketime.set_offset(self.offset_file, self.offset_s)
        except OSError as exc:
            raise InjectionError(f"clock-skew on {self.target}: {exc}") from exc

    def revert(self) -> None:
        faketime.set_offset(self.offset_file, 0.0)


def clock_skew(target: MachineTarget, fault: ClockSkewFault, host: str) -> Injector:
    """clock-skew of a member: the sandbox emulator's own clock, or libfaketime's offset file
    of a local member (the run started it under libfaketime)."""
    if getattr(target, "platform", None) == "sandbox":
        return ClockSkew(host, fault.clock_offset, fault.clock_drift, target.connect_options)
    offset_file = getattr(target.hosts, "clock_files", {}).get(host)
    if offset_file is None:
        raise InjectionError(f"clock-skew: {host} was not started under libfaketime")
    return FaketimeClockSkew(host, fault.clock_offset, offset_file, target.connect_options)
