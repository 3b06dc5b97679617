"""MongoDB's own specification tests as the judge of the sandbox: pymongo's CRUD and retryable
writes unified suites, and its SDAM suites (its harness, unmodified, from its source
distribution) against fresh rs3 sandboxes. Every test listed in expected_rs3.txt and
expected_sdam_rs3.txt passed in three runs in a row when it was recorded; one that fails now is
a regression of the emulator. Record again with `python bench/spec_conformance.py --suites
crud,retryable_writes --write-expected ...` (the SDAM ones: `--suites` as in SDAM_SUITES)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXPECTED = Path(__file__).with_name("expected_rs3.txt")
# The SDAM suites (discovery and monitoring, its events, the streaming protocol, heartbeats,
# connections surviving a stepdown, server selection in the latency window).
SDAM_SUITES = ("sdam", "sdam_monitoring", "streaming_protocol", "heartbeat_monitoring",
               "survive_stepdown", "server_selection")  # fmt: skip
EXPECTED_SDAM = Path(__file__).with_name("expected_sdam_rs3.txt")


def _no_regression(suites: tuple[str, ...], expected: Path, tmp_path: Path, port_base: int) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "spec_conformance.py"), "--suites",
         ",".join(suites), "--expect", str(expected), "--out",
         str(tmp_path / "conformance.json"), "--port-base", str(port_base)],
        capture_output=True, text=True, timeout=850, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert "regressions: 0" in done.stdout


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_no_spec_test_that_passed_fails_now(
    tmp_path: Path, free_port_base: Callable[[int], int]
) -> None:
    _no_regression(("crud", "retryable_writes"), EXPECTED, tmp_path, free_port_base(6))


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_no_sdam_spec_test_that_passed_fails_now(
    tmp_path: Path, free_port_base: Callable[[int], int]
) -> None:
    """Every suite has a sandbox of its own: three ports each."""
    _no_regression(SDAM_SUITES, EXPECTED_SDAM, tmp_path, free_port_base(3 * len(SDAM_SUITES)))
