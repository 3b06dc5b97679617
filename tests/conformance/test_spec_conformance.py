"""MongoDB's own specification tests as the judge of the sandbox: pymongo's CRUD, retryable
writes and reads, transactions, sessions and causal-consistency suites (its harness, unmodified,
from its source distribution) against fresh rs3 sandboxes. Every test listed in expected_rs3.txt
passed in three runs in a row when it was recorded; one that fails now is a regression of the
emulator. Record again with `python bench/spec_conformance.py --suites <DATA_SUITES>
--write-expected ...` three times and keep the tests that passed in all three. The SDAM suites
are test_sdam_conformance.py (a file of their own, so xdist runs the two at once)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXPECTED = Path(__file__).with_name("expected_rs3.txt")
DATA_SUITES = ("crud", "retryable_writes", "retryable_reads", "transactions", "sessions",
               "causal_consistency")  # fmt: skip


def no_regression(
    suites: tuple[str, ...], expected: Path, tmp_path: Path, port_base: int, split: str = ""
) -> None:
    """Runs `suites` (a sandbox each, three ports from `port_base` on) and fails on any test of
    `expected` that fails twice; `split` (K/N): part K of each suite and of `expected` only."""
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "spec_conformance.py"), "--suites",
         ",".join(suites), "--expect", str(expected), "--out",
         str(tmp_path / "conformance.json"), "--port-base", str(port_base),
         *(["--split", split] if split else [])],
        capture_output=True, text=True, timeout=850, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert "regressions: 0" in done.stdout


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_no_spec_test_that_passed_fails_now(
    tmp_path: Path, free_port_base: Callable[[int], int]
) -> None:
    no_regression(DATA_SUITES, EXPECTED, tmp_path, free_port_base(3 * len(DATA_SUITES)))
