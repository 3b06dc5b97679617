"""The live view off a terminal (a CI log): the status as a log line of its own every few
seconds, so a long fault is not minutes of silence."""

from __future__ import annotations

import io
import logging
import time

from rsdrill.engine.live import LiveView
from rsdrill.history import History, RunClock


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_off_a_terminal_the_status_comes_as_lines_at_the_heartbeat() -> None:
    stream = io.StringIO()
    lines = _Lines()
    logger = logging.getLogger("rsdrill.run")
    logger.addHandler(lines)
    # setLevel, not `logger.level =`: the logger caches what it is enabled for, and a run earlier
    # in this process (another test's) leaves it cached as not enabled for INFO.
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        view = LiveView(History(), stream, heartbeat_s=0.05)
        view.start()
        time.sleep(0.15)
        assert lines.lines == []  # no status line without the run's clock
        view.clock = RunClock.start()
        view.phase = "faults"
        deadline = time.monotonic() + 10
        while sum(x.startswith("[faults]") for x in lines.lines) < 2:
            assert time.monotonic() < deadline, lines.lines
            time.sleep(0.02)
        view.stop()
    finally:
        logger.removeHandler(lines)
        logger.setLevel(level)
    status = [x for x in lines.lines if x.startswith("[faults] t+")]
    assert len(status) >= 2 and "faults: none" in status[0]
    assert stream.getvalue() == ""  # off a terminal nothing is drawn on the stream itself
