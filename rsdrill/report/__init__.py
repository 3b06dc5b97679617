"""Reports of a run: result.json, junit.xml, report.html, summary.md and history.jsonl.

`result.json` is the CONTRACT (see `rsdrill.result`); the others are views of it for CI test
reporting (JUnit), people (HTML, with the timeline chart) and CI step summaries (Markdown).
`history.jsonl` keeps every probe attempt, one JSON object per line, for re-analysis.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from contextlib import suppress
from pathlib import Path
from typing import TextIO

from rsdrill.errors import RsdrillError
from rsdrill.history import History, Op
from rsdrill.redact import redact_uri
from rsdrill.report.html import render_html
from rsdrill.report.junit import render_junit
from rsdrill.report.markdown import render_summary
from rsdrill.result import Result

REPORT_FILES = {
    "result": "result.json",
    "junit": "junit.xml",
    "html": "report.html",
    "summary": "summary.md",
    "history": "history.jsonl",
}


class ReportError(RsdrillError):
    """A report could not be written (a full disk, no permission). `result` is the run's."""

    def __init__(self, message: str, result: Result) -> None:
        super().__init__(message)
        self.result = result


def write_reports(out_dir: Path, result: Result, ops: Sequence[Op]) -> dict[str, Path]:
    """Write every report into `out_dir` (created if missing); returns their paths by kind.

    Kinds: "result", "junit", "html", "summary", "history" (see `REPORT_FILES`). One that
    cannot be written raises `ReportError`, leaving no truncated file and none of an earlier
    run's reports in `out_dir` (CI would publish yesterday's junit.xml as today's).
    """
    paths = {kind: out_dir / name for kind, name in REPORT_FILES.items()}
    # junit.xml sits next to report.html, so a relative link works wherever CI unpacks them.
    texts = {
        "result": result.to_json() + "\n",
        "junit": render_junit(result, report_href=REPORT_FILES["html"]),
        "html": render_html(result, ops),
        "summary": render_summary(result, str(paths["html"])),
    }
    kind = "result"
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        for kind, text in texts.items():
            # Whatever a message quotes (an error holding the URI), no password reaches a report.
            _replace_text(paths[kind], redact_uri(text))
        kind = "history"
        history = ops if isinstance(ops, History) else History.from_ops(ops)
        _replace(paths[kind], history.write_to)
    except OSError as exc:
        for stale in list(paths)[list(paths).index(kind) :]:
            with suppress(OSError):
                paths[stale].unlink(missing_ok=True)
        raise ReportError(f"cannot write {paths[kind]}: {exc.strerror or exc}", result) from exc
    return paths


def _replace_text(path: Path, text: str) -> None:
    _replace(path, lambda f: f.write(text))


def _replace(path: Path, write: Callable[[TextIO], object]) -> None:
    """`path` written whole or not at all: a full disk leaves no half-written report."""
    partial = path.with_name(f".{path.name}.partial")
    try:
        with partial.open("w", encoding="utf-8") as f:
            write(f)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


__all__ = ["REPORT_FILES", "ReportError", "write_reports"]
