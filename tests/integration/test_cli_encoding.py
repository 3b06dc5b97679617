"""A standard output whose encoding is not UTF-8 (a Latin-1 locale, a cp1252 console): what it
cannot encode is written escaped, never a UnicodeEncodeError traceback and exit 1 (to CI, an SLO
that failed, or from `history --fail-on-regression` a regression)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.harness.cli import rsdrill_run

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("args", "escaped"),
    [
        (["plan", str(ROOT / "experiments" / "rs3-disaster-recovery-drill.yaml")], "\\u2192"),
        (["check", str(ROOT / "experiments" / "rs3-stepdown.yaml")], "\\u2714 target"),
    ],
    ids=["plan", "check"],
)
def test_a_latin_1_stdout_gets_escapes_not_a_traceback(
    args: list[str], escaped: str, tmp_path: Path
) -> None:
    env = {**os.environ, "PYTHONIOENCODING": "latin-1", "RSDRILL_HOME": str(tmp_path)}
    done = rsdrill_run(args, capture_output=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert b"Traceback" not in done.stderr
    assert escaped.encode() in done.stdout
