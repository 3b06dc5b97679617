"""`rsdrill history`: the recorded runs as a table, regressions marked, and a trend chart.

The store (and with it sqlite3 and pydantic) is imported inside the command so that
`rsdrill --help` stays fast.
"""

import datetime as dt
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

from rsdrill.cli.errors import exit_invalid, json_errors, refuse, write_out
from rsdrill.cli.run import HISTORY_DB

if TYPE_CHECKING:
    from rsdrill.runs import Baseline, Regression, Run

# Exit statuses beyond the result contract's: a regression, and a history that cannot be read.
EXIT_REGRESSION = 1
EXIT_STORE_ERROR = 4


app = typer.Typer()

DbOption = Annotated[
    str,
    typer.Option("--db", envvar="RSDRILL_HISTORY", metavar="PATH|URL",
                 help="The history: a SQLite file, or a shared store's mongodb:// URI."),
]  # fmt: skip
KOption = Annotated[
    float, typer.Option("--k", min=0, help="How many robust standard deviations make a regression.")
]
WindowOption = Annotated[
    int, typer.Option("--window", min=1, help="How many previous runs form the baseline.")
]


@app.callback(invoke_without_command=True)
@json_errors
def history(
    ctx: typer.Context,
    db: DbOption = str(HISTORY_DB),
    experiment: Annotated[
        str | None, typer.Option("--experiment", help="Only this experiment's runs.")
    ] = None,
    cluster: Annotated[
        str | None,
        typer.Option("--cluster", help="Only this cluster's runs (as the tables name it)."),
    ] = None,
    all_clusters: Annotated[
        bool,
        typer.Option(
            "--all-clusters",
            help="Begin with the fleet: each cluster's runs, last verdict and the regressions "
            "of its newest runs.",
        ),
    ] = False,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            metavar="DATE",
            help="Only runs started from then on: an ISO date or date-time, UTC unless it "
            "says otherwise (2024-05-01, 2024-05-01T02:00).",
        ),
    ] = None,
    metrics: Annotated[
        list[str] | None,
        typer.Option(
            "--metric",
            help="A metric to show and check, as named in SLOs; repeat for more (default: "
            "write_unavailable_s, failover_s, recovery_s.max, lost_acknowledged_writes, "
            "latency_ms.p99).",
        ),
    ] = None,
    chart: Annotated[
        Path | None,
        typer.Option(
            "--chart",
            dir_okay=False,
            help="Write a trend chart to this file: SVG, or an HTML page if it ends in .html.",
        ),
    ] = None,
    fail_on_regression: Annotated[
        bool,
        typer.Option(
            "--fail-on-regression", help="Exit 1 when the newest run of any experiment regressed."
        ),
    ] = False,
    k: KOption = 3.0,
    window: WindowOption = 10,
    output_format: Annotated[
        Literal["table", "openmetrics"],
        typer.Option(
            "--format",
            help="table, or openmetrics: runs per experiment and verdict, and each experiment's "
            "newest run's metrics, for a Prometheus scrape or textfile.",
        ),
    ] = "table",
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print the runs shown, their metrics and the regressions as JSON (the table's "
            "content; --fail-on-regression still sets the exit status).",
        ),
    ] = False,
) -> None:
    """Show recorded runs (time, verdict, key metrics) with regressions marked: a metric above the
    rolling median of the experiment's previous runs by more than k * MAD. `rsdrill history
    push DIR...` adds runs to the shared store afterwards."""
    if ctx.invoked_subcommand is not None:
        return
    from rsdrill import store

    names = metric_names(metrics)
    if as_json and output_format != "table":
        exit_invalid(f"--json and --format {output_format}: choose one")
    start = _parse_since(since) if since else None
    try:
        # The baseline reaches back before --since: only the display is limited to it.
        runs = store.read(db, experiment, cluster=_cluster_key(cluster))
    except store.StoreError as exc:
        refuse(f"cannot read the history: {exc}", EXIT_STORE_ERROR)
    judged = {m: store.baselines(runs, m, k=k, window=window) for m in names}
    found = store.regressions(runs, names, k=k, window=window)
    shown = [r for r in runs if start is None or r.started_at >= start]
    narrowed = bool(experiment or since or cluster is not None)
    if fail_on_regression and not shown:
        # A gate with nothing to judge is a mistyped --db, --experiment or --cluster (a job's
        # own run is recorded before its check): exit 0 would pass every night unseen.
        exit_invalid(f"--fail-on-regression: {_none_recorded(db, narrowed)}: nothing to check")
    if output_format == "openmetrics":
        from rsdrill.report import openmetrics

        try:
            typer.echo(openmetrics.exposition(openmetrics.history_registry(shown)), nl=False)
        except openmetrics.MetricsExportError as exc:
            exit_invalid(str(exc))
        return
    shown_ids = {r.id for r in shown}
    found = [g for g in found if g.run.id in shown_ids]
    flagged = {(g.run.id, g.metric) for g in found}
    newest = {(r.cluster, r.experiment): r for r in shown}  # oldest first: the last one stays
    regressed = sorted(
        {_name(g.run) for g in found if newest[g.run.cluster, g.run.experiment] is g.run}
    )
    if chart is not None and shown:
        _write_chart(chart, shown, names, judged, flagged)
    if as_json:
        typer.echo(json.dumps(_history_json(shown, names, found, regressed, k, window), indent=2))
    elif not shown:
        typer.echo(_none_recorded(db, narrowed))
        return
    else:
        if all_clusters:
            from rsdrill.report.fleet import summarize, summary_rows

            typer.echo(_grid(summary_rows(summarize(shown, found))) + "\n")
        typer.echo(_tables(shown, names, flagged), nl=False)
        if found:
            typer.echo(
                f"\n! regression: more than {k:g} * 1.4826 * MAD above the median of the "
                f"previous {window} runs"
            )
            for g in found:
                typer.echo(f"  {_describe(g)}")
        if chart is not None:
            typer.echo(f"\nchart: {chart}")
    if fail_on_regression and regressed:
        typer.echo(f"\nthe newest run regressed: {', '.join(regressed)}", err=True)
        raise typer.Exit(EXIT_REGRESSION)


def _none_recorded(db: str, narrowed: bool) -> str:
    from rsdrill.redact import redact_uri

    return f"no runs recorded in {redact_uri(db)}" + " that match" * narrowed


@app.command()
def push(
    dirs: Annotated[
        list[Path], typer.Argument(help="Run directories (each with result.json).", metavar="DIR")
    ],
    db: DbOption = str(HISTORY_DB),
) -> None:
    """Add runs to the history after the fact (a shared store that was down when they ended).
    A run already there is replaced, not added twice."""
    from rsdrill import store
    from rsdrill.result import ResultFileError, read_result

    for directory in dirs:
        try:
            result = read_result(directory / "result.json")
        except ResultFileError as exc:
            exit_invalid(str(exc))
        try:
            store.record_at(result, directory, db)
        except store.StoreError as exc:
            typer.echo(f"cannot record {directory}: {exc}", err=True)
            raise typer.Exit(EXIT_STORE_ERROR) from None
        typer.echo(f"recorded {result.experiment} ({result.started_at}) from {directory}")


def metric_names(metrics: list[str] | None) -> list[str]:
    """--metric's names (exit 2 naming the unknown ones), else the key metrics."""
    from rsdrill import store
    from rsdrill.analysis.slo import known_metric

    names = metrics or list(store.KEY_METRICS)
    unknown = [m for m in names if not known_metric(m)]
    if unknown:
        exit_invalid(f"--metric: unknown metric {', '.join(map(repr, unknown))}")
    return names


def _parse_since(text: str) -> dt.datetime:
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        exit_invalid(f"--since: {text!r} is not an ISO date or date-time (e.g. 2024-05-01)")
    return moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)


def _cluster_key(cluster: str | None) -> str | None:
    """--cluster as stored: the tables show runs of no named cluster as "(unnamed)"."""
    from rsdrill.report.fleet import UNNAMED

    return "" if cluster == UNNAMED else cluster


def _name(run: "Run") -> str:
    """An experiment, and the cluster when there is one: the same experiment on two clusters
    is judged apart."""
    return f"{run.experiment} on {run.cluster}" if run.cluster else run.experiment


def _grid(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def _tables(runs: "list[Run]", metrics: list[str], flagged: set[tuple[int, str]]) -> str:
    """One table per experiment and cluster: time, verdict and each metric, regressions
    marked `!`."""
    from rsdrill.report.common import fmt_number

    out = []
    for cluster, experiment in dict.fromkeys((r.cluster, r.experiment) for r in runs):
        mine = [r for r in runs if (r.cluster, r.experiment) == (cluster, experiment)]
        count = sum(1 for r in mine for m in metrics if (r.id, m) in flagged)
        out.append(
            f"{_name(mine[0])}: {len(mine)} run{'s' * (len(mine) != 1)}"
            + (f", {count} regression{'s' * (count != 1)}" if count else "")
        )
        rows = [["time (UTC)", "verdict", *metrics]]
        for run in mine:
            cells = [f"{run.started_at:%Y-%m-%d %H:%M:%S}", run.verdict]
            for metric in metrics:
                mark = " !" if (run.id, metric) in flagged else ""
                cells.append(fmt_number(run.metrics.get(metric)) + mark)
            rows.append(cells)
        out.append(_grid(rows))
        out.append("")
    return "\n".join(out)


def _history_json(
    runs: "list[Run]",
    metrics: list[str],
    found: "list[Regression]",
    regressed: list[str],
    k: float,
    window: int,
) -> dict[str, Any]:
    """What the tables and the regression lines show, as data: each run with the metrics shown
    (null: not measured) and the ones that regressed, each regression with its baseline."""
    flagged: dict[int, list[str]] = {}
    for g in found:
        flagged.setdefault(g.run.id, []).append(g.metric)
    return {
        "metrics": metrics,
        "k": k,
        "window": window,
        "runs": [
            {
                "id": run.id,
                "experiment": run.experiment,
                "cluster": run.cluster,
                "started_at": run.started_at.isoformat(),
                "verdict": run.verdict,
                "duration_s": run.duration_s,
                "out_dir": str(run.out_dir),
                "metrics": {m: run.metrics.get(m) for m in metrics},
                "regressed": flagged.get(run.id, []),
            }
            for run in runs
        ],
        "regressions": [
            {
                "run_id": g.run.id,
                "experiment": g.run.experiment,
                "cluster": g.run.cluster,
                "metric": g.metric,
                "value": g.value,
                "threshold": g.baseline.threshold,
                "median": g.baseline.median,
                "mad": g.baseline.mad,
                "baseline_runs": g.baseline.size,
            }
            for g in found
        ],
        "newest_regressed": regressed,
    }


def _describe(regression: "Regression") -> str:
    from rsdrill.report.common import fmt_number

    g, base = regression, regression.baseline
    return (
        f"{_name(g.run)} {g.run.started_at:%Y-%m-%d %H:%M:%S}: {g.metric} "
        f"{fmt_number(round(g.value, 3))} > {fmt_number(round(base.threshold, 3))} "
        f"(median {fmt_number(round(base.median, 3))}, MAD {fmt_number(round(base.mad, 3))}, "
        f"{base.size} runs) — {g.run.out_dir}"
    )


def _write_chart(
    path: Path,
    runs: "list[Run]",
    metrics: list[str],
    judged: "dict[str, dict[int, Baseline]]",
    flagged: set[tuple[int, str]],
) -> None:
    from rsdrill.report.trend import render_trend_html, render_trend_svg

    render = render_trend_html if path.suffix.lower() in (".html", ".htm") else render_trend_svg
    write_out(path, render(runs, metrics, judged, flagged), "--chart")
