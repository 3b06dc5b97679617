"""report.html: one self-contained page (header, SLOs, timeline chart, metrics) that opens offline.

The tables are rendered here, escaped with `html.escape`; the chart is drawn in the browser by the
inlined script from the embedded JSON (`assets.py`). A Content-Security-Policy forbids fetching
anything, so even a mistake could not make the report reach the network.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence

from rsdrill.history import Op
from rsdrill.report.assets import CSS, JS
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
from rsdrill.report.timeline import timeline_data
from rsdrill.result import Result

_CSP = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:"
_LOST_SEQS_SHOWN = 50


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def script_json(payload: object) -> str:
    """JSON that is safe inside `<script>`: no `<`, `>` or `&` can end the element or open one."""
    text = json.dumps(payload, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _section(title: str, element_id: str, lines: list[str]) -> str:
    """A heading and a list of report lines (nothing without lines)."""
    if not lines:
        return ""
    items = "".join(f"<li>{_e(line.strip())}</li>" for line in lines)
    return f'<h2>{title}</h2><ul id="{element_id}">{items}</ul>'


def _facts(result: Result) -> str:
    target = result.target
    facts = [
        ("started", result.started_at),
        ("duration", fmt_number(result.duration_s, "s")),
        ("target", f"{target.platform} {target.topology}"),
        ("uri", target.uri),
        ("members", ", ".join(target.members) or "n/a"),
        ("server", describe_server(target.server)),
        ("exit code", result.exit_code),
        ("rsdrill", result.rsdrill_version or "n/a"),
    ]
    items = "".join(f"<div><dt>{_e(k)}</dt><dd>{_e(v)}</dd></div>" for k, v in facts)
    return f'<dl class="facts">{items}</dl>'


def _slo_table(result: Result) -> str:
    if not result.slo:
        return '<p class="note">No SLOs in this experiment.</p>'
    rows = []
    for slo in result.slo:
        observed = slo_observed(slo)
        said = slo_outcome(result, slo)
        kind = {"pass": "pass", "FAIL": "fail"}.get(said, "unjudged")
        outcome = f'<span class="res-{kind}">{said}</span>'
        rows.append(
            f'<tr class="slo-{kind}"><td>{_e(slo.metric)}</td>'
            f'<td>{_e(slo_condition(slo))}</td><td class="num">{_e(observed)}</td>'
            f"<td>{outcome}</td></tr>"
        )
    head = "<tr><th>metric</th><th>condition</th><th>observed</th><th>result</th></tr>"
    return f'<table id="slo">{head}{"".join(rows)}</table>'


def _metrics_table(result: Result) -> str:
    rows = "".join(
        f'<tr><td>{_e(name)}</td><td class="num">{_e(fmt_number(value))}</td></tr>'
        for name, value in scalar_metrics(result.metrics)
    )
    lost = result.metrics.lost_acknowledged_seqs
    if lost:
        shown = ", ".join(map(str, lost[:_LOST_SEQS_SHOWN]))
        more = f" and {len(lost) - _LOST_SEQS_SHOWN} more" if len(lost) > _LOST_SEQS_SHOWN else ""
        rows += f"<tr><td>lost_acknowledged_seqs</td><td>{_e(shown + more)}</td></tr>"
    return f'<table id="metrics"><tr><th>metric</th><th>value</th></tr>{rows}</table>'


def _faults_table(result: Result) -> str:
    if not result.faults:
        return '<p class="note">No faults were injected.</p>'
    rows = "".join(
        f"<tr><td>{_e(f.kind)}</td><td>{_e(f.target)}</td>"
        f'<td class="num">{_e(fmt_number(f.due_at_s))}</td>'
        f'<td class="num">{_e(fmt_number(f.injected_at_s))}</td>'
        f'<td class="num">{_e(fmt_number(f.verified_at_s))}</td>'
        f'<td class="num">{_e("never" if f.reverted_at_s is None else fmt_number(f.reverted_at_s))}'
        "</td></tr>"
        for f in result.faults
    )
    head = (
        "<tr><th>kind</th><th>target</th><th>due (s)</th><th>injected (s)</th><th>verified (s)</th>"
        "<th>reverted (s)</th></tr>"
    )
    restarts = "".join(f'<p class="note">{_e(line)}</p>'
                       for line in map(ha_restart_line, result.faults) if line)  # fmt: skip
    return f'<table id="faults">{head}{rows}</table>{restarts}'


def render_html(result: Result, ops: Sequence[Op]) -> str:
    """The report page for `result` and the probe attempts `ops` (any number: they are reduced)."""
    # Through pydantic's JSON encoder, which writes NaN and infinities as null, like result.json.
    payload = {"result": json.loads(result.to_json())}
    payload["timeline"] = timeline_data(result, ops)
    error = f'<h2>Error</h2><pre class="error">{_e(result.error)}</pre>' if result.error else ""
    stalled = stall_line(result.metrics)
    stall = (
        "" if stalled is None else f'<p class="note" id="stall"><strong>{_e(stalled)}</strong></p>'
    )
    audit = _section("Data audit", "audit", audit_lines(result))
    recovery = _section("Recovery", "recovery", recovery_lines(result))
    verdict = _e(result.verdict)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{_CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>rsdrill: {_e(result.experiment)}: {verdict}</title>
<style>{CSS}</style>
</head>
<body>
<main>
<h1><span id="experiment">{_e(result.experiment)}</span>
<span class="verdict verdict-{verdict}" id="verdict">{verdict.upper()}</span></h1>
{_facts(result)}
{error}
<h2>SLOs</h2>
{_slo_table(result)}
{stall}
{recovery}
{audit}
<h2>Timeline</h2>
<div class="chart">
<svg id="timeline" role="img" viewBox="0 0 1200 40"
 aria-label="timeline of faults, probe outcomes, member states and latency"></svg>
<noscript><p class="note">The timeline is drawn by JavaScript; the tables below need none.</p>
</noscript>
</div>
<p class="note">Times are seconds since the run started. Hover over the chart for details;
history.jsonl next to this file holds every probe attempt.</p>
<div class="tables">
<div><h2>Metrics</h2>{_metrics_table(result)}</div>
<div><h2>Faults</h2>{_faults_table(result)}</div>
</div>
</main>
<script type="application/json" id="rsdrill-data">{script_json(payload)}</script>
<script>{JS}</script>
</body>
</html>
"""
