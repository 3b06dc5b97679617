"""What stops a run from outside its schedule while the probes run: the experiment's abort
conditions, judged on the history so far, and the fleet's gate (its stop lever engaged, the
cluster's lease lost). Checked every quarter second on a thread of its own."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from rsdrill.analysis.abort import CHECK_INTERVAL_S, first_breach, parse_condition
from rsdrill.engine.options import RunGate
from rsdrill.history import History, RunClock

EXIT_STOPPED = 5
"""The exit status of a run the fleet stopped (its lever), beside the result contract's 0-4."""


class StopWatch:
    def __init__(
        self,
        conditions: Sequence[str],
        gate: RunGate | None,
        history: History,
        clock: RunClock,
        on_stop: Callable[[str, int | None], None],
    ) -> None:
        """`conditions`: abort conditions, already valid; `on_stop(reason, exit status or None
        for the verdict's)` is called once."""
        self.conditions = [parse_condition(c) for c in conditions]
        self.gate = gate
        self.history, self.clock = history, clock
        self.on_stop = on_stop
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.conditions or self.gate is not None:
            self._thread = threading.Thread(target=self._watch, name="rsdrill-abort",
                                            daemon=True)  # fmt: skip
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _watch(self) -> None:
        while not self._stop.wait(CHECK_INTERVAL_S):
            stopped = self.gate.stopped() if self.gate is not None else None
            if stopped is not None:
                self.on_stop(stopped, EXIT_STOPPED)
                return
            breach = first_breach(self.conditions, self.history.ops(), self.clock.now())
            if breach is not None:
                self.on_stop(breach.message(), None)
                return
