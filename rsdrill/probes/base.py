"""What every probe shares: a thread on a fixed-rate tick, and how attempts become history.

A probe never judges: it records each attempt with its start, end, outcome and the facts the
analyzers need, and goes on until it is stopped.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, ClassVar

from pymongo import monitoring
from pymongo.errors import (
    ConnectionFailure,
    ExecutionTimeout,
    NetworkTimeout,
    PyMongoError,
    ServerSelectionTimeoutError,
    WTimeoutError,
)

from rsdrill.connection import ConnectOptions, DirectConnection, WireClientError
from rsdrill.history import LATE_START_OP, STALL_PROBE, History, Op, RunClock

LATE_START_S = 0.010
"""An attempt that begins later than this past its due time is recorded as a late start (by
probes that say `records_late_starts`): below it, the lateness is within the sampling's own
resolution (an interval of 10-20 ms)."""


class Probe:
    """A named thread that calls `tick()` every `interval_s` until stopped."""

    name = "probe"
    records_late_starts: ClassVar[bool] = False
    """Whether a tick begun more than `LATE_START_S` late is recorded: for the probes whose gaps
    are availability figures, so that a gap can tell the time this process was due to ask and
    did not (a thread starved of CPU or of the GIL) from the cluster's."""

    def __init__(self, history: History, clock: RunClock, interval_s: float) -> None:
        self.history = history
        self.clock = clock
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"rsdrill-{self.name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def close(self) -> None:
        """Release connections; called once the thread has ended."""

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def _run(self) -> None:
        next_at = self.clock.now()
        while not self._stop.is_set():
            t_start = self.clock.now()
            if self.records_late_starts and t_start - next_at > LATE_START_S:
                self.record(LATE_START_OP, None, next_at, "timeout", {"probe": self.name},
                            probe=STALL_PROBE)  # fmt: skip
            try:
                self.tick()
            except Exception as exc:  # a probe must outlive anything a server answers
                self.record(
                    "tick",
                    None,
                    t_start,
                    "error",
                    {"error": repr(exc)[:300], "type": type(exc).__name__},
                )
            # Fixed rate: a slow attempt eats into the next wait, missed ticks are skipped.
            next_at += self.next_wait_s()
            now = self.clock.now()
            if next_at < now:
                next_at = now
            self._stop.wait(next_at - now)

    def tick(self) -> None:
        raise NotImplementedError

    def next_wait_s(self) -> float:
        """From this tick's start to the next one's: the interval, unless a probe knows better."""
        return self.interval_s

    def record(
        self,
        op: str,
        member: str | None,
        t_start: float,
        outcome: str,
        detail: dict[str, Any] | None = None,
        probe: str | None = None,
    ) -> None:
        self.history.append(
            Op(probe or self.name, op, member, t_start, self.clock.now(), outcome, detail or {})
        )


def classify(exc: PyMongoError) -> tuple[str, dict[str, Any]]:
    """("timeout" | "error", detail) for a failed pymongo operation."""
    timeout = isinstance(
        exc, NetworkTimeout | ServerSelectionTimeoutError | ExecutionTimeout | WTimeoutError
    )
    detail: dict[str, Any] = {
        "error": str(exc).split(", full error")[0][:300],
        "code": getattr(exc, "code", None),
        "type": type(exc).__name__,
    }
    if isinstance(exc, ConnectionFailure) and not timeout:
        detail["network"] = True
    return ("timeout" if timeout else "error"), detail


class ServedBy(monitoring.CommandListener):
    """Remembers which server answered the last command of the calling thread."""

    def __init__(self) -> None:
        self._local = threading.local()

    @property
    def last(self) -> str | None:
        return getattr(self._local, "host", None)

    def reset(self) -> None:
        self._local.host = None

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        host, port = event.connection_id
        self._local.host = f"{host}:{port}"

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def timed(clock: RunClock, fn: Callable[[], Any]) -> tuple[float, Any, PyMongoError | None]:
    """Run fn; (t_start, result or None, the pymongo error or None)."""
    t_start = clock.now()
    try:
        return t_start, fn(), None
    except PyMongoError as exc:
        return t_start, None, exc


class MemberPoller(Probe):
    """Asks one member a command directly every interval; a member that does not answer is
    recorded as an error or timeout, the answer goes to `answered`."""

    op = "command"
    command: dict[str, Any] = {}

    def __init__(
        self,
        history: History,
        clock: RunClock,
        *,
        member: str,
        interval_s: float,
        timeout_s: float,
        options: ConnectOptions,
    ) -> None:
        super().__init__(history, clock, interval_s)
        self.member = member
        self._conn = DirectConnection(member, timeout_s, options)

    def tick(self) -> None:
        t_start = self.clock.now()
        try:
            reply = self._conn.command("admin", self.command)
        except WireClientError as exc:
            self.unanswered(t_start, exc)
            return
        self.answered(t_start, reply)

    def answered(self, t_start: float, reply: dict[str, Any]) -> None:
        raise NotImplementedError

    def unanswered(self, t_start: float, exc: WireClientError) -> None:
        """A command the member did not answer: an error or a timeout in the history."""
        outcome = "timeout" if exc.timeout else "error"
        self.record(self.op, self.member, t_start, outcome, {"error": str(exc)})

    def close(self) -> None:
        self._conn.close()
