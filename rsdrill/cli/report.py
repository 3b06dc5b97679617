"""`rsdrill report fleet`: the fleet view of the history as one self-contained page."""

from pathlib import Path
from typing import Annotated

import typer

from rsdrill.cli.errors import write_out
from rsdrill.cli.history import EXIT_STORE_ERROR, DbOption, KOption, WindowOption, metric_names
from rsdrill.cli.run import HISTORY_DB

app = typer.Typer(help="Reports over many runs.", no_args_is_help=True)


@app.command()
def fleet(
    out: Annotated[
        Path,
        typer.Option("--out", file_okay=False, help="Write fleet.html into this directory."),
    ],
    db: DbOption = str(HISTORY_DB),
    metrics: Annotated[
        list[str] | None,
        typer.Option("--metric", help="A metric to show and check; repeat for more."),
    ] = None,
    last: Annotated[
        int, typer.Option("--last", min=1, help="How many runs of each experiment to list.")
    ] = 10,
    k: KOption = 3.0,
    window: WindowOption = 10,
) -> None:
    """One page with each cluster's last runs, verdicts and metric trends, the regressions of
    each experiment on each cluster flagged (a self-contained fleet.html: no script, nothing
    fetched)."""
    from rsdrill import store
    from rsdrill.redact import redact_uri
    from rsdrill.report.fleet import render_fleet_html, summarize

    names = metric_names(metrics)
    try:
        runs = store.read(db)
    except store.StoreError as exc:
        typer.echo(f"cannot read the history: {exc}", err=True)
        raise typer.Exit(EXIT_STORE_ERROR) from None
    judged = {m: store.baselines(runs, m, k=k, window=window) for m in names}
    found = store.regressions(runs, names, k=k, window=window)
    flagged = {(g.run.id, g.metric) for g in found}
    summaries = summarize(runs, found)
    page = render_fleet_html(summaries, names, judged, flagged, source=redact_uri(db), last=last)
    path = out / "fleet.html"
    write_out(path, page)
    failing = sum(s.status == "failing" for s in summaries)
    regressed = sum(s.status == "regressed" for s in summaries)
    typer.echo(f"{len(summaries)} clusters, {len(runs)} runs: {failing} failing, "
               f"{regressed} regressed; {path}")  # fmt: skip
