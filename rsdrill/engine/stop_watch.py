"""What stops a run from outside its schedule while the probes run: the experiment's abort
conditions, judged on the history so far every quarter second; the team's own monitoring
(`abort_on:` Prometheus queries and CloudWatch alarms), each asked every second on a thread of
its own, so a slow one delays nothing else; and the fleet's gate (its stop lever engaged, the
cluster's lease lost)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from rsdrill.analysis.abort import (
    CHECK_INTERVAL_S,
    LiveFigures,
    first_breach,
    parse_condition,
)
from rsdrill.engine.monitors import Monitor, MonitorError, Unreachable, monitor
from rsdrill.engine.options import RunGate
from rsdrill.experiment.stop_sources import MonitorCondition
from rsdrill.history import History, RunClock

EXIT_STOPPED = 5
"""The exit status of a run the fleet stopped (its lever), beside the result contract's 0-4."""
MONITOR_EVERY_S = 1.0


class StopWatch:
    def __init__(
        self,
        conditions: Sequence[str | MonitorCondition],
        gate: RunGate | None,
        history: History,
        clock: RunClock,
        on_stop: Callable[[str, int | None], None],
    ) -> None:
        """`conditions`: the abort conditions and monitoring sources, already valid;
        `on_stop(reason, exit status or None for the verdict's)` is called once."""
        self.conditions = [parse_condition(c) for c in conditions if isinstance(c, str)]
        self.monitors = [monitor(c) for c in conditions if not isinstance(c, str)]
        self.gate = gate
        self.history, self.clock = history, clock
        self.on_stop = on_stop
        # Sources that could not be asked and were ignored (on_unreachable: ignore), for the
        # result: each once, with the first reason.
        self.ignored: list[str] = []
        self._stop = threading.Event()
        self._stopped = threading.Lock()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        if self.conditions or self.gate is not None:
            self._threads.append(threading.Thread(target=self._watch, name="rsdrill-abort",
                                                  daemon=True))  # fmt: skip
        self._threads += [threading.Thread(target=self._ask, args=(m,), daemon=True)
                          for m in self.monitors]  # fmt: skip
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()

    def _fire(self, reason: str, exit_code: int | None) -> None:
        if self._stopped.acquire(blocking=False):
            self.on_stop(reason, exit_code)

    def _watch(self) -> None:
        figures, seen = LiveFigures(), 0
        while not self._stop.wait(CHECK_INTERVAL_S):
            stopped = self.gate.stopped() if self.gate is not None else None
            if stopped is not None:
                self._fire(stopped, EXIT_STOPPED)
                return
            if not self.conditions:
                continue  # the gate alone: no history to read
            new = self.history.since(seen)
            seen += len(new)
            now = self.clock.now()
            figures.take(new, now)
            breach = first_breach(self.conditions, figures, now)
            if breach is not None:
                self._fire(breach.message(), None)
                return

    def _ask(self, source: Monitor) -> None:
        """Ask now and every second; stop the run once it has said stop for its `for`."""
        since: float | None = None
        while not self._stop.is_set():
            try:
                firing = source.firing()
            except Unreachable as exc:
                if source.on_unreachable == "abort":
                    self._fire(f"{exc} (on_unreachable: abort)", None)
                    return
                if not any(i.startswith(source.name) for i in self.ignored):
                    self.ignored.append(str(exc))
                firing = False
            except MonitorError as exc:
                self._fire(str(exc), None)
                return
            now = time.monotonic()
            since = (since or now) if firing else None
            if since is not None and now - since >= source.for_s:
                held = f" for {source.for_s:g} s" if source.for_s else ""
                self._fire(f"{source.name} says stop{held}", None)
                return
            self._stop.wait(MONITOR_EVERY_S)
