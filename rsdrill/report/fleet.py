"""The fleet view: each cluster's last runs, verdicts and metric trends, regressions flagged.

`summarize` is what `rsdrill history --all-clusters` prints and `render_fleet_html` draws as
one self-contained page (`rsdrill report fleet`): no script, nothing fetched, every name
escaped. A regression is judged against the same experiment's previous runs on the same
cluster (`rsdrill.store.baselines`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from rsdrill.report.common import fmt_number
from rsdrill.report.trend import render_trend_svg
from rsdrill.runs import Baseline, Regression, Run

UNNAMED = "(unnamed)"
"""How runs recorded before clusters were named are shown."""


@dataclass(frozen=True)
class ClusterSummary:
    """One cluster's runs, oldest first, and what its newest runs say."""

    cluster: str
    runs: list[Run]
    newest: dict[str, Run]  # experiment -> its newest run here
    regressed: dict[str, list[Regression]]  # experiment -> its newest run's regressions

    @property
    def last(self) -> Run:
        return self.runs[-1]

    @property
    def failing(self) -> list[str]:
        """The experiments whose newest run here did not pass."""
        return [e for e, run in self.newest.items() if run.verdict != "pass"]

    @property
    def status(self) -> str:
        """ok, regressed (passing, but a newest run regressed) or failing."""
        return "failing" if self.failing else "regressed" if self.regressed else "ok"


def label(cluster: str) -> str:
    return cluster or UNNAMED


_STATUS_ORDER = ("failing", "regressed", "ok")


def summarize(runs: Sequence[Run], found: Sequence[Regression]) -> list[ClusterSummary]:
    """The clusters of `runs` (oldest first), failing ones first, then regressed ones, each with
    `found`'s regressions of each experiment's newest run there."""
    clusters: dict[str, list[Run]] = {}
    for run in runs:
        clusters.setdefault(run.cluster, []).append(run)
    summaries = []
    for cluster in clusters:
        mine = clusters[cluster]
        newest = {run.experiment: run for run in mine}
        newest_ids = {run.id for run in newest.values()}
        regressed: dict[str, list[Regression]] = {}
        for g in found:
            if g.run.id in newest_ids:  # run ids are unique: only this cluster's
                regressed.setdefault(g.run.experiment, []).append(g)
        summaries.append(ClusterSummary(cluster, mine, newest, regressed))
    # What needs a look first: failing clusters, then regressed ones.
    return sorted(summaries, key=lambda s: (_STATUS_ORDER.index(s.status), s.cluster))


def summary_rows(summaries: Sequence[ClusterSummary]) -> list[list[str]]:
    """The fleet table as text cells, a header first (what `rsdrill history --all-clusters`
    prints)."""
    rows = [["cluster", "runs", "last run (UTC)", "last verdict", "status", "newest regressed"]]
    for s in summaries:
        rows.append([
            label(s.cluster),
            str(len(s.runs)),
            f"{s.last.started_at:%Y-%m-%d %H:%M:%S}",
            f"{s.last.verdict} ({s.last.experiment})",
            s.status,
            ", ".join(f"{e}: {', '.join(g.metric for g in gs)}" for e, gs in s.regressed.items())
            or "-",
        ])  # fmt: skip
    return rows


_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
_STYLE = """
body { font: 14px system-ui, -apple-system, "Segoe UI", "Liberation Sans", sans-serif;
       color: #1f2328; margin: 24px; }
h1 { font-size: 20px; } h2 { font-size: 17px; margin-top: 32px; } h3 { font-size: 14px; }
table { border-collapse: collapse; margin: 8px 0 16px; }
th, td { border: 1px solid #d0d7de; padding: 4px 8px; text-align: left; }
th { background: #f6f8fa; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.status { font-weight: 700; padding: 2px 8px; border-radius: 10px; color: #fff; }
.status.ok { background: #1a7f37; } .status.regressed { background: #bf8700; }
.status.failing { background: #cf222e; }
.verdict-pass { color: #1a7f37; } .verdict-fail, .verdict-error { color: #cf222e; }
.verdict-aborted { color: #bf8700; }
td.regression { background: #ffebe9; color: #cf222e; font-weight: 700; }
.muted { color: #656d76; }
"""


def _e(value: object) -> str:
    return escape(str(value), quote=True)


def render_fleet_html(
    summaries: Sequence[ClusterSummary],
    metrics: Sequence[str],
    judged: dict[str, dict[int, Baseline]],
    flagged: set[tuple[int, str]],
    *,
    source: str,
    last: int = 10,
    generated_at: dt.datetime | None = None,
) -> str:
    """The fleet page: a table of clusters, then each cluster's last `last` runs of each
    experiment and its trend chart. `judged` and `flagged` as for `render_trend_svg`;
    `source` names the history (passwords already redacted)."""
    moment = generated_at or dt.datetime.now(dt.UTC)
    rows = []
    for n, s in enumerate(summaries):
        regressed = "; ".join(
            f"{e}: {', '.join(g.metric for g in gs)}" for e, gs in s.regressed.items()
        )
        rows.append(
            f'<tr class="cluster-row" data-cluster="{_e(s.cluster)}" data-status="{s.status}">'
            f'<td><a href="#cluster-{n}">{_e(label(s.cluster))}</a></td>'
            f'<td class="num">{len(s.runs)}</td>'
            f'<td class="num">{len(s.newest)}</td>'
            f"<td>{s.last.started_at:%Y-%m-%d %H:%M:%S}</td>"
            f'<td class="verdict-{_e(s.last.verdict)}">{_e(s.last.verdict)} '
            f'<span class="muted">({_e(s.last.experiment)})</span></td>'
            f'<td><span class="status {s.status}">{s.status}</span></td>'
            f"<td>{_e(regressed) or '-'}</td></tr>"
        )
    head = (
        "<tr><th>cluster</th><th>runs</th><th>experiments</th><th>last run (UTC)</th>"
        "<th>last verdict</th><th>status</th><th>newest runs regressed</th></tr>"
    )
    sections = [
        _cluster_section(n, s, metrics, judged, flagged, last) for n, s in enumerate(summaries)
    ]
    total = sum(len(s.runs) for s in summaries)
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">\n'
        f"<title>rsdrill fleet</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n"
        "<h1>rsdrill fleet</h1>\n"
        f'<p class="muted">{len(summaries)} cluster{"s" * (len(summaries) != 1)}, {total} '
        f"run{'s' * (total != 1)} in {_e(source)}; generated {moment:%Y-%m-%d %H:%M:%S} UTC. "
        "A regression: a metric above the median of the same experiment's previous runs on "
        "the same cluster by more than k robust standard deviations.</p>\n"
        + (
            f'<table id="fleet"><thead>{head}</thead><tbody>{"".join(rows)}</tbody></table>\n'
            if rows
            else '<p id="fleet">no runs recorded</p>\n'
        )
        + "".join(sections)
        + "</body>\n</html>\n"
    )


def _cluster_section(
    n: int,
    summary: ClusterSummary,
    metrics: Sequence[str],
    judged: dict[str, dict[int, Baseline]],
    flagged: set[tuple[int, str]],
    last: int,
) -> str:
    parts = [
        f'<section class="cluster" id="cluster-{n}" data-cluster="{_e(summary.cluster)}">'
        f"<h2>{_e(label(summary.cluster))}</h2>"
    ]
    header = "".join(f"<th>{_e(m)}</th>" for m in metrics)
    for experiment in summary.newest:
        mine = [r for r in summary.runs if r.experiment == experiment]
        rows = []
        for run in reversed(mine[-last:]):
            cells = []
            for metric in metrics:
                value = fmt_number(run.metrics.get(metric))
                if (run.id, metric) in flagged:
                    base = judged[metric][run.id]
                    tip = f"above {fmt_number(round(base.threshold, 3))} (median " \
                          f"{fmt_number(round(base.median, 3))} of {base.size} runs)"  # fmt: skip
                    cells.append(f'<td class="num regression" data-metric="{_e(metric)}" '
                                 f'title="{_e(tip)}">{_e(value)} !</td>')  # fmt: skip
                else:
                    cells.append(f'<td class="num">{_e(value)}</td>')
            rows.append(
                f'<tr class="run" data-verdict="{_e(run.verdict)}">'
                f"<td>{run.started_at:%Y-%m-%d %H:%M:%S}</td>"
                f'<td class="verdict-{_e(run.verdict)}">{_e(run.verdict)}</td>{"".join(cells)}'
                "</tr>"
            )
        shown = f"the last {last} of {len(mine)}" if len(mine) > last else f"{len(mine)}"
        parts.append(
            f'<div class="experiment" data-experiment="{_e(experiment)}">'
            f'<h3>{_e(experiment)} <span class="muted">({shown} run'
            f"{'s' * (len(mine) != 1)}, newest first)</span></h3>"
            f"<table><thead><tr><th>time (UTC)</th><th>verdict</th>{header}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table></div>"
        )
    parts.append(render_trend_svg(summary.runs, metrics, judged, flagged, standalone=False))
    parts.append("</section>\n")
    return "".join(parts)
