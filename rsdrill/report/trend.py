"""The trend chart of `rsdrill history --chart`: one panel per experiment and metric.

Each panel plots the metric run by run, the rolling median it is judged against and the
regression threshold above it, with regressions in red; every point has a tooltip. The output
is one self-contained file, SVG or HTML, with no script and nothing fetched.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import TYPE_CHECKING

from rsdrill.report.common import fmt_number

if TYPE_CHECKING:
    from rsdrill.runs import Baseline, Run

WIDTH = 760
PANEL_H = 170
_LEFT, _RIGHT, _TOP, _BOTTOM = 64, 16, 30, 26
_STYLE = """
text { font: 11px system-ui, -apple-system, "Segoe UI", "Liberation Sans", sans-serif;
       fill: #1f2328; }
.title { font-weight: 700; font-size: 12px; }
.tick { fill: #656d76; font-size: 10px; }
.grid { stroke: #e6e9ed; stroke-width: 1; }
.value { fill: none; stroke: #0969da; stroke-width: 1.5; }
.median { fill: none; stroke: #656d76; stroke-width: 1; stroke-dasharray: 4 3; }
.threshold { fill: none; stroke: #d7263d; stroke-width: 1; stroke-dasharray: 2 3; opacity: .7; }
.point { fill: #0969da; }
.point.unjudged { fill: #fff; stroke: #0969da; }
.point.regression { fill: #d7263d; }
"""


def render_trend_svg(
    runs: Sequence[Run],
    metrics: Sequence[str],
    judged: dict[str, dict[int, Baseline]],
    flagged: set[tuple[int, str]],
    *,
    standalone: bool = True,
) -> str:
    """The chart of `runs` (oldest first) for `metrics`, as an `<svg>` element.

    `judged[metric]` maps run ids to the baseline the run was judged against (see
    `rsdrill.store.baselines`); `flagged` holds the (run id, metric) pairs that regressed.
    `standalone` adds the SVG namespace, which a `.svg` file needs and HTML does not.
    """
    experiments = list(dict.fromkeys(r.experiment for r in runs))
    panels: list[str] = []
    for experiment in experiments:
        mine = [r for r in runs if r.experiment == experiment]
        for metric in metrics:
            y = len(panels) * PANEL_H
            panels.append(_panel(experiment, metric, mine, judged.get(metric, {}), flagged, y))
    height = max(len(panels), 1) * PANEL_H
    namespace = ' xmlns="http://www.w3.org/2000/svg"' if standalone else ""
    body = "".join(panels) or '<text x="10" y="20">no runs recorded</text>'
    return (
        f'<svg{namespace} width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" '
        f'role="img" aria-label="rsdrill run history"><style>{_STYLE}</style>{body}</svg>\n'
    )


def render_trend_html(
    runs: Sequence[Run],
    metrics: Sequence[str],
    judged: dict[str, dict[int, Baseline]],
    flagged: set[tuple[int, str]],
) -> str:
    """`render_trend_svg` in a page of its own."""
    svg = render_trend_svg(runs, metrics, judged, flagged, standalone=False)
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        "<title>rsdrill: run history</title>\n</head>\n<body>\n"
        f'<h1 style="font: 700 18px system-ui, sans-serif">rsdrill run history</h1>\n{svg}'
        "</body>\n</html>\n"
    )


def _panel(
    experiment: str,
    metric: str,
    runs: Sequence[Run],
    judged: dict[int, Baseline],
    flagged: set[tuple[int, str]],
    top: float,
) -> str:
    plot_w = WIDTH - _LEFT - _RIGHT
    plot_h = PANEL_H - _TOP - _BOTTOM
    values = [r.metrics.get(metric) for r in runs]
    baselines = [judged.get(r.id) for r in runs]
    highest = max(
        [v for v in values if v is not None] + [b.threshold for b in baselines if b is not None],
        default=0.0,
    )
    y_max = highest * 1.1 if highest > 0 else 1.0
    step = plot_w / (len(runs) - 1) if len(runs) > 1 else 0.0

    def x(i: int) -> float:
        return _LEFT + (i * step if len(runs) > 1 else plot_w / 2)

    def y(v: float) -> float:
        return top + _TOP + plot_h * (1 - v / y_max)

    parts = [
        f'<text class="title" x="{_LEFT}" y="{top + 18}">'
        f"{escape(experiment)}: {escape(metric)}</text>"
        f'<text class="tick" x="{WIDTH - _RIGHT}" y="{top + 18}" text-anchor="end">'
        "line: value, grey dashes: rolling median, red dots: threshold, red: regression</text>"
    ]
    for fraction in (0.0, 0.5, 1.0):
        gy = y(y_max * fraction)
        parts.append(
            f'<line class="grid" x1="{_LEFT}" x2="{WIDTH - _RIGHT}" y1="{gy:.1f}" y2="{gy:.1f}"/>'
            f'<text class="tick" x="{_LEFT - 6}" y="{gy + 3:.1f}" text-anchor="end">'
            f"{y_max * fraction:.3g}</text>"
        )
    if runs:
        bottom = top + PANEL_H - 8
        first, last = runs[0].started_at, runs[-1].started_at
        parts.append(
            f'<text class="tick" x="{x(0):.1f}" y="{bottom}">{first:%Y-%m-%d %H:%M}</text>'
        )
        if len(runs) > 1:
            parts.append(
                f'<text class="tick" x="{x(len(runs) - 1):.1f}" y="{bottom}" text-anchor="end">'
                f"{last:%Y-%m-%d %H:%M} UTC</text>"
            )
    for cls, series in (
        ("threshold", [None if b is None else b.threshold for b in baselines]),
        ("median", [None if b is None else b.median for b in baselines]),
        ("value", values),
    ):
        for segment in _segments(series):
            points = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in segment)
            parts.append(f'<polyline class="{cls}" points="{points}"/>')
    if all(v is None for v in values):
        parts.append(
            f'<text class="tick" x="{_LEFT + plot_w / 2}" y="{top + _TOP + plot_h / 2}" '
            'text-anchor="middle">not measured in these runs</text>'
        )
    for i, (run, value) in enumerate(zip(runs, values, strict=True)):
        if value is None:
            continue
        cls = "point"
        if (run.id, metric) in flagged:
            cls += " regression"
        elif run.id not in judged:
            cls += " unjudged"
        baseline = judged.get(run.id)
        against = (
            f", median {fmt_number(round(baseline.median, 3))}, "
            f"threshold {fmt_number(round(baseline.threshold, 3))}"
            if baseline
            else ""
        )
        tip = f"{run.started_at:%Y-%m-%d %H:%M:%S} UTC {run.verdict}: {fmt_number(value)}{against}"
        parts.append(
            f'<circle class="{cls}" cx="{x(i):.1f}" cy="{y(value):.1f}" r="3.5">'
            f"<title>{escape(tip)}</title></circle>"
        )
    return f"<g>{''.join(parts)}</g>"


def _segments(series: Sequence[float | None]) -> list[list[tuple[int, float]]]:
    """The runs of consecutive measured points: a polyline breaks where a value is missing."""
    segments: list[list[tuple[int, float]]] = [[]]
    for i, value in enumerate(series):
        if value is None:
            if segments[-1]:
                segments.append([])
        else:
            segments[-1].append((i, value))
    return [s for s in segments if s]
