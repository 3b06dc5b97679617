"""The library speaks through `logging` (`rsdrill.run`); the command line renders it as the
lines users have always read on stderr: a phase or guard before the probes start, then each
event with the run's clock."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

import pytest

import rsdrill
from rsdrill.hooks import hookimpl
from rsdrill.result import Result
from tests.harness.cli import rsdrill_run

EXPERIMENT = """\
name: log-lines
target: {platform: sandbox, topology: rs3, election_timeout: 1s}
faults:
  - {at: 1s, kind: host-freeze, select: secondary, duration: 1s}
observe: {after_revert: 3s}
"""

T = r"t\+ {0,3}\d+\.\d\ds "
LATE = r"( \(\d+\.\d\d s after its time\))?"  # a busy machine's
# What `rsdrill run --no-live` printed on stderr before the library logged (format unchanged).
EXPECTED = [
    "phase: setup",
    "phase: preflight",
    "phase: guards",
    r"guard allowlist: ok \(a sandbox built by this run\)",
    r"guard quorum: ok \(at most 1 member down at once, 3 voting, majority 2\)",
    r"guard oplog window: .+",
    r"guard member health: ok \(all healthy, max lag \d+\.\ds\)",
    T + "phase: faults",
    T + r"injected host-freeze on 127\.0\.0\.1:\d+" + LATE,
    T + r"reverted host-freeze on 127\.0\.0\.1:\d+" + LATE,
    T + "phase: observe",
    T + "phase: revert",
    T + "phase: analyze",
    T + "phase: audit",
    T + "phase: teardown",
]


def test_the_command_line_shows_the_run_as_before(tmp_path: Path) -> None:
    experiment = tmp_path / "exp.yaml"
    experiment.write_text(EXPERIMENT)
    run = rsdrill_run(
        ["run", str(experiment), "--out",
         str(tmp_path / "out"), "--no-live", "--no-history"],
        capture_output=True, text=True, timeout=180,
        env={**os.environ, "RSDRILL_HOME": str(tmp_path / "home")},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    lines = run.stderr.splitlines()
    assert len(lines) == len(EXPECTED), run.stderr
    for line, pattern in zip(lines, EXPECTED, strict=True):
        assert re.fullmatch(pattern, line), (line, pattern)


class Verdicts:
    """A plugin handed to the library's run: what it was told of the verdict."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    @hookimpl
    def rsdrill_verdict(self, result: Result) -> None:
        self.seen.append(result.verdict)


def test_the_library_logs_instead_of_printing(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    experiment = tmp_path / "exp.yaml"
    experiment.write_text(EXPERIMENT)
    os.environ.setdefault("RSDRILL_HOME", str(tmp_path / "home"))
    verdicts = Verdicts()
    with caplog.at_level(logging.INFO, logger="rsdrill"):
        result = rsdrill.run(rsdrill.load(experiment), out=tmp_path / "out", plugins=[verdicts])
    assert result.verdict == "pass" and verdicts.seen == ["pass"]
    assert capfd.readouterr().err == ""
    events = [(r.name, r.getMessage()) for r in caplog.records if r.name == "rsdrill.run"]
    assert events[0] == ("rsdrill.run", "phase: setup")
    assert any(m.startswith("injected host-freeze on ") for _, m in events)
    timed = [r for r in caplog.records if getattr(r, "run_t_s", None) is not None]
    assert timed and timed[0].getMessage() == "phase: faults"
