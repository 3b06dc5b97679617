"""`rsdrill run --interactive` on a real terminal (a pty): each fault waits for a yes, `r`
reverts early, `a` aborts, and nothing is left behind."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.cli import Rsdrill, rsdrill_run

EXPERIMENT = """\
name: game-day
target: {platform: sandbox, topology: rs3, election_timeout: 1s}
probes: {lag: null, durability: null}
faults:
  - {at: 2s, kind: host-kill, select: secondary, duration: 5m}
observe: {after_revert: 20s}
"""


_started: list[subprocess.Popen[bytes]] = []


class Terminal:
    """`rsdrill run --interactive` with a pty for its stdin, stdout and stderr."""

    def __init__(self, tmp_path: Path, experiment: Path) -> None:
        self.master, slave = pty.openpty()
        self.out = tmp_path / "out"
        self.proc = Rsdrill(
            ["run", str(experiment), "--interactive",
             "--out", str(self.out), "--no-history"],
            stdin=slave, stdout=slave, stderr=slave, close_fds=True,
            env={**os.environ, "RSDRILL_HOME": str(tmp_path / "home")},
        )  # fmt: skip
        os.close(slave)
        _started.append(self.proc)
        self.seen = ""

    def wait_for(self, text: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.seen:
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"never saw {text!r}; the terminal showed:\n{self.seen}")
            ready, _, _ = select.select([self.master], [], [], min(left, 0.5))
            if ready:
                try:
                    self.seen += os.read(self.master, 4096).decode(errors="replace")
                except OSError:  # the run exited and closed the terminal
                    pytest.fail(f"never saw {text!r}; the terminal showed:\n{self.seen}")

    def press(self, key: str) -> None:
        os.write(self.master, key.encode())

    def finish(self, timeout: float = 90) -> int:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < deadline:
            ready, _, _ = select.select([self.master], [], [], 0.5)
            if ready:
                try:
                    self.seen += os.read(self.master, 4096).decode(errors="replace")
                except OSError:
                    break
        code = self.proc.wait(timeout=max(deadline - time.monotonic(), 1))
        os.close(self.master)
        return code


@pytest.fixture
def experiment(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "exp.yaml"
    path.write_text(EXPERIMENT)
    yield path
    # A test that failed half-way leaves its run going: SIGTERM makes it revert and tear down.
    for proc in _started:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
    _started.clear()


def _result(terminal: Terminal) -> dict:
    return json.loads((terminal.out / "result.json").read_text())


@pytest.mark.slow
def test_confirmed_fault_goes_in_and_r_reverts_it_early(tmp_path: Path, experiment: Path) -> None:
    terminal = Terminal(tmp_path, experiment)
    terminal.wait_for("Inject it? [y]es, [s]kip, [a]bort")
    assert "injected host-kill" not in terminal.seen  # nothing goes in before the yes
    terminal.press("y")
    terminal.wait_for("injected host-kill")
    terminal.press("r")
    terminal.wait_for("reverted host-kill")
    assert terminal.finish() == 0, terminal.seen
    fault = _result(terminal)["faults"][0]
    # Scheduled to stay down five minutes; the key brought it back within seconds.
    assert fault["reverted_at_s"] - fault["injected_at_s"] < 60
    assert fault["detail"]["reverted_early"] is True
    assert _result(terminal)["verdict"] == "pass"


@pytest.mark.slow
def test_a_at_the_question_aborts_with_nothing_injected(tmp_path: Path, experiment: Path) -> None:
    terminal = Terminal(tmp_path, experiment)
    terminal.wait_for("Inject it?")
    terminal.press("a")
    assert terminal.finish() == 3, terminal.seen
    result = _result(terminal)
    assert (result["verdict"], result["error"]) == ("aborted", "aborted from the keyboard")
    assert result["faults"] == []


def test_interactive_without_a_terminal_exits_2(tmp_path: Path, experiment: Path) -> None:
    done = rsdrill_run(
        ["run", str(experiment), "--interactive",
         "--out", str(tmp_path / "out"), "--no-history"],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
        env={**os.environ, "RSDRILL_HOME": str(tmp_path / "home")},
    )  # fmt: skip
    assert done.returncode == 2
    assert "--interactive needs a terminal" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()
