"""Reports of a run: result.json, junit.xml, report.html, summary.md and history.jsonl.

`result.json` is the CONTRACT (see `rsdrill.result`); the others are views of it for CI test
reporting (JUnit), people (HTML, with the timeline chart) and CI step summaries (Markdown).
`history.jsonl` keeps every probe attempt, one JSON object per line, for re-analysis.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

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


def write_reports(out_dir: Path, result: Result, ops: Sequence[Op]) -> dict[str, Path]:
    """Write every report into `out_dir` (created if missing); returns their paths by kind.

    Kinds: "result", "junit", "html", "summary", "history" (see `REPORT_FILES`).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {kind: out_dir / name for kind, name in REPORT_FILES.items()}
    # junit.xml sits next to report.html, so a relative link works wherever CI unpacks them.
    texts = {
        "result": result.to_json() + "\n",
        "junit": render_junit(result, report_href=REPORT_FILES["html"]),
        "html": render_html(result, ops),
        "summary": render_summary(result, str(paths["html"])),
    }
    for kind, text in texts.items():
        # Whatever a message quotes (an error holding the URI), no password reaches a report.
        paths[kind].write_text(redact_uri(text), encoding="utf-8")
    (ops if isinstance(ops, History) else History.from_ops(ops)).write_jsonl(paths["history"])
    return paths


__all__ = ["REPORT_FILES", "write_reports"]
