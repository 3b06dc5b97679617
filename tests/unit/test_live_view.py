"""The live view off a terminal (a CI log): events as lines, and the status as a line of its own
every few seconds, so a long fault is not minutes of silence."""

from __future__ import annotations

import io
import time

from rsdrill.engine.live import LiveView
from rsdrill.history import History, RunClock


def test_off_a_terminal_the_status_comes_as_lines_at_the_heartbeat() -> None:
    stream = io.StringIO()
    view = LiveView(History(), stream, heartbeat_s=0.05)
    view.start()
    view.event("before the clock: no status yet")
    time.sleep(0.15)
    assert "[" not in stream.getvalue()  # no status line without the run's clock
    view.clock = RunClock.start()
    view.phase = "faults"
    deadline = time.monotonic() + 10
    while stream.getvalue().count("[faults]") < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    view.stop()
    lines = stream.getvalue().splitlines()
    status = [line for line in lines if line.startswith("[faults] t+")]
    assert len(status) >= 2, lines
    assert "\r" not in stream.getvalue() and "\x1b" not in stream.getvalue()  # no redraws
    assert "faults: none" in status[0]
