"""summary.md: the verdict and the numbers, sized for a CI step summary (`$GITHUB_STEP_SUMMARY`).

Text that came from users or platforms (experiment names, targets, error strings) is escaped:
step summaries render Markdown *and* inline HTML, so a name must not become markup.
"""

from __future__ import annotations

import re

from rsdrill.report.common import (
    audit_lines,
    describe_server,
    fmt_number,
    ha_restart_line,
    recovery_lines,
    scalar_metrics,
    slo_condition,
    slo_observed,
    slo_outcome,
    stall_line,
)
from rsdrill.result import Result

# Every ASCII punctuation character may be backslash-escaped in CommonMark; these are the ones
# that can start markup inline or break a table cell.
_MARKUP = re.compile(r"([\\`*_\[\]<>|~&!#])")


def md_escape(text: str) -> str:
    """`text` as literal inline Markdown on one line (safe inside a table cell)."""
    return _MARKUP.sub(r"\\\1", " ".join(text.split()))


def _code(text: str) -> str:
    """`text` as an inline code span; GFM tables still split code spans on a bare pipe."""
    if "`" in text or "\n" in text:
        return md_escape(text)
    return "`" + text.replace("|", "\\|") + "`"


def _fence(text: str) -> str:
    """A fenced block that `text` cannot close: the fence is longer than any backtick run in it."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text}\n{fence}"


def render_summary(result: Result, report_path: str) -> str:
    """The Markdown summary of `result`; `report_path` is shown as where the full report is."""
    lines = [
        f"## rsdrill: {md_escape(result.experiment)}: {result.verdict.upper()}",
        "",
        f"- verdict: **{result.verdict}** (exit code {result.exit_code})",
        f"- started: {md_escape(result.started_at)}, duration {fmt_number(result.duration_s)} s",
        f"- target: {md_escape(result.target.platform)} {md_escape(result.target.topology)}"
        + (f" ({md_escape(', '.join(result.target.members))})" if result.target.members else ""),
        f"- server: {md_escape(describe_server(result.target.server))}",
        f"- report: {_code(report_path)} (self-contained HTML: timeline, member states, latency)",
        "",
    ]
    if result.error:
        lines += ["### Error", "", _fence(result.error), ""]

    lines += ["### SLOs", ""]
    if result.slo:
        lines += ["| metric | condition | observed | result |", "|---|---|---|---|"]
        for slo in result.slo:
            outcome = {"FAIL": "**FAIL**"}.get(said := slo_outcome(result, slo), said)
            observed = slo_observed(slo)
            condition = md_escape(slo_condition(slo))
            lines.append(f"| {_code(slo.metric)} | {condition} | {observed} | {outcome} |")
    else:
        lines.append("No SLOs in this experiment.")
    if (stalled := stall_line(result.metrics)) is not None:
        lines += ["", f"> **{md_escape(stalled)}**"]
    lines.append("")
    if recovered := recovery_lines(result):
        lines += ["### Recovery", "", *(f"- {md_escape(line.strip())}" for line in recovered), ""]
    if audited := audit_lines(result):
        lines += ["### Data audit", "", *(f"- {md_escape(line.strip())}" for line in audited), ""]

    measured = [
        (name, value) for name, value in scalar_metrics(result.metrics) if value is not None
    ]
    lines += ["### Key metrics", ""]
    if measured:
        lines += ["| metric | value |", "|---|---|"]
        lines += [f"| {_code(name)} | {fmt_number(value)} |" for name, value in measured]
    else:
        lines.append("Nothing was measured.")
    lines.append("")

    lines += ["### Faults", ""]
    if result.faults:
        lines += ["| kind | target | due at | injected at | reverted at |", "|---|---|---|---|---|"]
        for fault in result.faults:
            due, injected = fmt_number(fault.due_at_s, "s"), fmt_number(fault.injected_at_s, "s")
            reverted = (
                "never" if fault.reverted_at_s is None else fmt_number(fault.reverted_at_s, "s")
            )
            lines.append(
                f"| {md_escape(fault.kind)} | {md_escape(fault.target)} | {due} | {injected} "
                f"| {reverted} |"
            )
        restarts = [line for line in map(ha_restart_line, result.faults) if line]
        if restarts:
            lines += ["", *(f"- {md_escape(line)}" for line in restarts)]
    else:
        lines.append("No faults were injected.")
    lines.append("")
    return "\n".join(lines)
