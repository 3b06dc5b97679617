"""The live view off a terminal (a CI log): the status as a log line of its own every few
seconds, so a long fault is not minutes of silence."""

from __future__ import annotations

import contextlib
import io
import logging
import re
import time
from collections.abc import Iterator

from rsdrill.engine.live import LiveView
from rsdrill.history import FaultRecord, History, Op, RunClock


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@contextlib.contextmanager
def _run_log() -> Iterator[list[str]]:
    """The messages of the run's logger while in the block, INFO and up."""
    lines = _Lines()
    logger = logging.getLogger("rsdrill.run")
    logger.addHandler(lines)
    # setLevel, not `logger.level =`: the logger caches what it is enabled for, and a run earlier
    # in this process (another test's) leaves it cached as not enabled for INFO.
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        yield lines.lines
    finally:
        logger.removeHandler(lines)
        logger.setLevel(level)


def test_off_a_terminal_the_status_comes_as_lines_at_the_heartbeat() -> None:
    stream = io.StringIO()
    with _run_log() as lines:
        view = LiveView(History(), stream, heartbeat_s=0.05)
        view.start()
        time.sleep(0.15)
        assert lines == []  # no status line without the run's clock
        view.clock = RunClock.start()
        view.phase = "faults"
        deadline = time.monotonic() + 10
        while sum(x.startswith("[faults]") for x in lines) < 2:
            assert time.monotonic() < deadline, lines
            time.sleep(0.02)
        view.stop()
    status = [x for x in lines if x.startswith("[faults] t+")]
    assert len(status) >= 2 and "faults: none" in status[0]
    assert stream.getvalue() == ""  # off a terminal nothing is drawn on the stream itself


def test_the_status_names_the_primary_of_the_last_fifty_polls_and_the_write_gap() -> None:
    history = History()
    view = LiveView(history, io.StringIO())
    view.clock = RunClock(time.monotonic() - 10.0, time.time() - 10.0)  # ten seconds in

    def poll(member: str, writable: bool) -> Op:
        return Op("failover", "hello", member, 1.0, 1.1, "ok", {"writable": writable})

    assert "primary ?" in view.status_line() and "write gap   -  " in view.status_line()
    history.append(poll("a:1", True))
    history.append(Op("write", "insert", "a:1", 2.0, 4.0, "ok"))
    history.append(Op("write", "insert", "a:1", 5.0, 5.5, "error"))
    assert "primary a:1" in view.status_line()
    # Ten seconds in, the last good write ended at 4 s (a slow machine may add a tenth or so).
    assert re.search(r"write gap +6\.\ds", view.status_line())
    for _ in range(49):
        history.append(poll("b:2", False))
    assert "primary a:1" in view.status_line()  # its answer is the 50th poll from the end
    history.append(poll("b:2", False))
    assert "primary ?" in view.status_line()
    history.append(poll("b:2", True))
    assert "primary b:2" in view.status_line()


def test_once_the_probes_stop_the_status_counts_no_write_gap() -> None:
    history = History()
    view = LiveView(history, io.StringIO())
    view.clock = RunClock(time.monotonic() - 10.0, time.time() - 10.0)
    history.append(Op("write", "insert", "a:1", 2.0, 4.0, "ok"))
    view.phase = "revert"
    assert re.search(r"write gap +6\.\ds", view.status_line())
    for phase in ("analyze", "audit", "teardown"):
        view.phase = phase
        line = view.status_line()
        assert line.endswith("probes stopped") and "write gap" not in line, line


def test_a_signal_to_a_stopping_run_is_told_what_is_left() -> None:
    view = LiveView(History(), io.StringIO())
    with _run_log() as lines:
        view.phase = "revert"
        view.stopping()
        view.phase = "analyze"
        view.stopping()
    assert lines == ["reverting faults; rsdrill exits once everything is restored",
                     "stopping: the faults are reverted; rsdrill exits once the results are "
                     "written"]  # fmt: skip


def test_a_fault_acted_on_late_says_how_late() -> None:
    with _run_log() as lines:
        view = LiveView(History(), io.StringIO())
        record = FaultRecord(0, "host-kill", "h:1", injected_at_s=5.31, due_at_s=5.0)
        view.acted("injected", record)
        record.revert_due_at_s, record.reverted_at_s = 35.3, 35.35  # within LATE_NOTE_S
        view.acted("reverted", record)
    assert lines == ["injected host-kill on h:1 (0.31 s after its time)",
                     "reverted host-kill on h:1"]  # fmt: skip
