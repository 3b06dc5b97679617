"""The fleet's stop lever: `rsdrill lever engage` stops every run that uses the store and keeps
new ones from starting until `rsdrill lever disengage`. It is an append-only log of signed
events; the newest genuine one says where the lever stands. Events not signed with the fleet
key are skipped and counted; a log whose newest events are all such is taken as engaged (a
lever nobody can read stops runs rather than letting them go)."""

from __future__ import annotations

import datetime as dt
import getpass
import socket
from dataclasses import dataclass
from typing import Any

from rsdrill.fleet.signing import genuine, signed
from rsdrill.fleet.store import FleetStore

LOOKBACK = 50
"""How many of the newest events are read for the lever's state."""


@dataclass(frozen=True)
class LeverState:
    engaged: bool
    reason: str = ""
    by: str = ""
    at: str = ""
    # Newer events than the one read that were not signed with the fleet key (ignored).
    ignored: int = 0

    def describe(self) -> str:
        if not self.engaged:
            text = "disengaged" + (f" by {self.by} at {self.at}" if self.by else "")
        else:
            text = f"engaged by {self.by or 'unknown'} at {self.at or 'unknown'}: {self.reason}"
        if self.ignored:
            text += f" ({self.ignored} newer record(s) not signed with the fleet key ignored)"
        return text


def who() -> str:
    """Who engages or disengages: user@host."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="microseconds")


def _event(engaged: bool, reason: str, by: str | None) -> dict[str, Any]:
    return {"engaged": engaged, "reason": reason, "by": by or who(), "at": _now()}


def engage(store: FleetStore, key: bytes | None, reason: str, by: str | None = None) -> None:
    store.add_lever_event(signed(_event(True, reason, by), key))


def disengage(store: FleetStore, key: bytes | None, by: str | None = None) -> None:
    store.add_lever_event(signed(_event(False, "", by), key))


def _well_formed(event: dict[str, Any]) -> bool:
    return isinstance(event.get("engaged"), bool) and isinstance(event.get("at"), str)


def state(store: FleetStore, key: bytes | None) -> LeverState:
    """Where the lever stands (raises FleetStoreError when the store cannot be read)."""
    events = store.lever_events(LOOKBACK)
    ignored = 0
    for event in events:
        if not (_well_formed(event) and genuine(event, key)):
            ignored += 1
            continue
        return LeverState(event["engaged"], str(event.get("reason", "")),
                          str(event.get("by", "")), event["at"], ignored)  # fmt: skip
    if ignored >= LOOKBACK:
        return LeverState(True, f"the newest {ignored} lever records are not signed with the "
                                "fleet key: it cannot be read", ignored=ignored)  # fmt: skip
    return LeverState(False, ignored=ignored)
