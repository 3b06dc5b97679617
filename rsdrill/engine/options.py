"""How a run is carried out beyond its experiment file (the CLI's and the library's options),
and the signal handlers that stop it."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

from rsdrill.engine.console import GameDayConsole


class RunGate(Protocol):
    """Permission from outside the run (rsdrill.fleet): a stop lever, a cluster's lease."""

    def stopped(self) -> str | None:
        """Why no run may go on now, else None (cheap: called every quarter second)."""

    def hold(self) -> None:
        """Hold the experiment's cluster for this run (done already: nothing); GuardRefusal
        when another run holds it."""

    def release(self) -> None: ...


@dataclass
class RunOptions:
    out_dir: Path
    live: bool = True
    journal_dir: Path | None = None
    # Test hook: called with each phase name as the run enters it.
    on_phase: Callable[[str], None] | None = None
    # Abort conditions on top of the experiment's `abort_on` (`--abort-on`), already valid.
    abort_on: tuple[str, ...] = ()
    # The allowlist guard: `--yes` skips the confirmation; `confirm` asks the user on a
    # terminal (None: there is none to ask on).
    assume_yes: bool = False
    confirm: Callable[[str], bool] | None = None
    # Game-day mode: confirm each fault on the terminal, revert early or abort on a key.
    console: GameDayConsole | None = None
    # Plugins of this run's events (rsdrill/hooks.py) besides the entry points' and the reports.
    plugins: tuple[object, ...] = ()
    # The fleet's lever and lease (None: no fleet store).
    gate: RunGate | None = None


def install_signal_handlers(handler: Callable[[int, FrameType | None], None]) -> dict[int, Any]:
    """SIGINT and SIGTERM to `handler` (only the main thread may set them); the handlers they
    had, for `restore_signal_handlers`."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}


def restore_signal_handlers(previous: dict[int, Any]) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)
