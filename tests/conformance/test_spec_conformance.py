"""MongoDB's own specification tests as the judge of the sandbox: pymongo's CRUD and retryable
writes unified suites (its harness, unmodified, from its source distribution) against a fresh
rs3 sandbox. Every test listed in expected_rs3.txt passed in three runs in a row when it was
recorded; one that fails now is a regression of the emulator. Record again with
`python bench/spec_conformance.py --suites crud,retryable_writes --write-expected ...`."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXPECTED = Path(__file__).with_name("expected_rs3.txt")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_no_spec_test_that_passed_fails_now(
    tmp_path: Path, free_port_base: Callable[[int], int]
) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "spec_conformance.py"), "--suites",
         "crud,retryable_writes", "--expect", str(EXPECTED), "--out",
         str(tmp_path / "conformance.json"), "--port-base", str(free_port_base(6))],
        capture_output=True, text=True, timeout=850, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert "regressions: 0" in done.stdout
