"""The live view of a run in the terminal: phase, elapsed, current primary, current write gap,
faults in force. On a terminal one status line is redrawn twice a second; elsewhere (a CI log)
the status comes every few seconds as a line of its own, so a long fault is never minutes of
silence. The run's events are logged (logger `rsdrill.run`, the run's clock as `run_t_s`); the
command line renders them as lines."""

from __future__ import annotations

import logging
import sys
import threading
from typing import TextIO

from rsdrill.analysis.abort import Gap
from rsdrill.history import FaultRecord, History, RunClock
from rsdrill.redact import redact_uri

HEARTBEAT_S = 5.0
"""Off a terminal: seconds between two status lines."""
RECENT_POLLS = 50
"""A primary is shown while one of the last this many failover polls found it writable."""

LATE_NOTE_S = 0.1
"""A fault acted on this much after its timeline's time or more is said to be late in its event
(rsdrill's own delay: waking, selecting, journaling; a busy machine took up to 0.12 s)."""

_log = logging.getLogger("rsdrill.run")


def late_note(due_s: float | None, at_s: float | None) -> str:
    """`" (0.31 s after its time)"` for an action that came LATE_NOTE_S or more after it was due."""
    if due_s is None or at_s is None or at_s - due_s < LATE_NOTE_S:
        return ""
    return f" ({at_s - due_s:.2f} s after its time)"


AFTER_PROBES = frozenset({"analyze", "audit", "teardown"})
"""The run's phases once its probes have stopped."""


class LiveView:
    def __init__(
        self, history: History, stream: TextIO | None = None, heartbeat_s: float = HEARTBEAT_S
    ) -> None:
        self.history = history
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.heartbeat_s = heartbeat_s
        self.phase = "starting"
        self.clock: RunClock | None = None
        self.faults: list[FaultRecord] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="rsdrill-live", daemon=True)
        self._seen = 0  # ops of the history folded in so far
        self._polls = 0  # failover polls among them
        self._primary = ("?", -RECENT_POLLS)  # the last writable member, at which poll
        self._writes = Gap()  # the end of the last successful write

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(2)
            if self.tty:
                self.stream.write("\n")
                self.stream.flush()

    def acted(self, verb: str, record: FaultRecord) -> None:
        """`injected host-kill on <host>` or `reverted ...`, said to be late when it was."""
        due, at = (
            (record.due_at_s, record.injected_at_s)
            if verb == "injected"
            else (record.revert_due_at_s, record.reverted_at_s)
        )
        self.event(f"{verb} {record.kind} on {record.target}{late_note(due, at)}")

    def set_phase(self, phase: str) -> None:
        self.phase = phase
        self.event(f"phase: {phase}")

    def stopping(self) -> None:
        """A signal to a run already stopping: what it is still doing (nothing else is done)."""
        if self.phase in AFTER_PROBES:
            self.event("stopping: the faults are reverted; rsdrill exits once the results are "
                       "written")  # fmt: skip
        else:
            self.event("reverting faults; rsdrill exits once everything is restored")

    def event(self, text: str) -> None:
        """Log one event of the run, with the run's clock once it started."""
        t_s = self.clock.now() if self.clock else None
        _log.info("%s", redact_uri(text), extra={"run_t_s": t_s})  # an event may quote the URI

    def _follow(self) -> None:
        """Fold in the ops recorded since the last status: a long run's status then costs its
        last half second, not a copy of everything recorded."""
        new = self.history.since(self._seen)
        self._seen += len(new)
        for op in new:
            if op.probe == "failover":
                self._polls += 1
                if op.ok and op.detail.get("writable"):
                    self._primary = (op.member or "?", self._polls)
            elif op.probe == "write":
                self._writes.take(op, op.ok)

    def status_line(self) -> str:
        now = self.clock.now() if self.clock else 0.0
        if self.phase in AFTER_PROBES:  # a gap counted on would be one nobody measured
            return f"[{self.phase}] t+{now:6.1f}s  probes stopped"
        self._follow()
        member, at = self._primary
        # The member the last writable answer named, if it came within the last 50 polls.
        primary = member if self._polls - at < RECENT_POLLS else "?"
        last_ok = self._writes.ok_end
        gap = f"{now - last_ok:5.1f}s" if last_ok is not None else "  -  "
        in_force = [
            f"{f.kind}@{f.target}"
            for f in self.faults
            if f.injected_at_s is not None and f.reverted_at_s is None
        ]
        return (
            f"[{self.phase}] t+{now:6.1f}s  primary {primary}  write gap {gap}  "
            f"faults: {', '.join(in_force) or 'none'}"
        )

    def _loop(self) -> None:
        while not self._stop.wait(0.5 if self.tty else self.heartbeat_s):
            if self.clock is None:
                continue
            if self.tty:
                self.stream.write("\r\x1b[2K" + self.status_line())
                self.stream.flush()
            else:  # a line of the log, as the events are (it carries its own time)
                _log.info("%s", redact_uri(self.status_line()), extra={"run_t_s": None})
