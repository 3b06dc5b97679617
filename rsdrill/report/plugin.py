"""The built-in outputs as a plugin of the run's events (see `rsdrill/hooks.py`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rsdrill.history import Op
from rsdrill.hooks import hookimpl
from rsdrill.report import write_reports
from rsdrill.result import Result


# First: result.json (the CONTRACT) is written before any other plugin's output is tried.
@hookimpl(tryfirst=True)
def rsdrill_run_finished(result: Result, ops: Sequence[Op], out_dir: Path) -> None:
    """result.json, junit.xml, report.html, summary.md and history.jsonl in `out_dir`."""
    write_reports(out_dir, result, ops)
