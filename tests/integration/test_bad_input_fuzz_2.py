"""The other half of tests/integration/test_bad_input_fuzz.py's mutated files (a file of its
own, so that two xdist workers share the fuzz): the same rule, one FILE:LINE:COL line and exit
status 2, or accepted by both validate and plan."""

from __future__ import annotations

from pathlib import Path

from tests.integration.test_bad_input_fuzz import CASES, command_built_once, fuzz

__all__ = ["command_built_once"]  # its autouse fixture, here too


def test_the_other_fuzzed_files_are_refused_in_one_located_line(tmp_path: Path) -> None:
    fuzz(CASES[1::2], tmp_path)
