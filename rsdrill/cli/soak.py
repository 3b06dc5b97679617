"""`rsdrill soak`: many short seeded runs, each checked against the invariants."""

import logging
from pathlib import Path
from typing import Annotated

import typer

from rsdrill.cli.errors import exit_invalid, ready_out_dir
from rsdrill.cli.run import HistoryOption, LeaseWaitOption


def soak(
    file: Annotated[Path, typer.Argument(help="The experiment file, with faults: {random}.")],
    duration: Annotated[
        str | None,
        typer.Option(
            "--duration", help="How long to soak, e.g. 30m, 1h (default 1h; none with --runs)."
        ),
    ] = None,
    out: Annotated[
        Path, typer.Option("--out", help="Where the violating run and shrunk schedule go.")
    ] = Path("rsdrill-results/soak"),
    max_runs: Annotated[
        int | None, typer.Option("--runs", min=1, help="Stop after this many runs.")
    ] = None,
    recovery_slo: Annotated[
        float,
        typer.Option(
            "--recovery-slo",
            min=0,
            help="Seconds a member may take to be healthy after its last fault's revert.",
        ),
    ] = 30.0,
    seed: Annotated[
        int | None, typer.Option("--seed", min=0, help="Seed of the run seeds (repeatable soak).")
    ] = None,
    history: HistoryOption = None,
    lease_wait: LeaseWaitOption = 0.0,
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose", "-v", help="Also print each run's events (phases, guards, faults)."
        ),
    ] = False,
) -> None:
    """Run the experiment again and again with fresh seeds, checking every history for lost
    majority writes, two primaries in one term, slow recovery, non-monotonic reads and
    non-linearizable register operations; on the first violation, shrink the schedule and
    print the replay command. Exit 0: nothing found; 1: a violation; 3: stopped by Ctrl-C or
    SIGTERM (the run it came in reverted) before anything was found; 5: stopped by the fleet's
    stop lever (or not started: it was engaged)."""
    from rsdrill.cli.fleet import fleet_gate
    from rsdrill.engine.soak import replay_command
    from rsdrill.engine.soak import soak as run_soak
    from rsdrill.experiment.loader import ExperimentError, load_experiment
    from rsdrill.fields import parse_duration
    from rsdrill.result import EXIT_CODES

    try:
        # --runs alone means that many runs, however long they take.
        seconds = (parse_duration(duration) if duration is not None
                   else float("inf") if max_runs is not None else 3600.0)  # fmt: skip
    except ValueError as exc:
        exit_invalid(f"--duration {duration!r}: {exc}")
    try:
        experiment = load_experiment(file)
    except ExperimentError as exc:
        exit_invalid(str(exc))
    if experiment.random_faults is None:
        exit_invalid(f"{file}: rsdrill soak needs `faults: {{random: ...}}` (each run draws "
                     "its own schedule)")  # fmt: skip
    ready_out_dir(out)
    # One line a run: each run's events go to its events.log (kept with a violating run).
    events = logging.getLogger("rsdrill.run")
    events.propagate = verbose
    gate = fleet_gate(experiment, history, lease_wait)
    try:
        report = run_soak(experiment, out, duration_s=seconds, max_runs=max_runs,
                          recovery_slo_s=recovery_slo, seed=seed, progress=typer.echo,
                          gate=gate)  # fmt: skip
    finally:
        events.propagate = True
    typer.echo(f"{len(report.runs)} runs in {report.elapsed_s:.0f}s "
               f"({report.runs_per_hour:.0f} runs/h)")  # fmt: skip
    violating = report.violating
    if violating is None and report.stopped_by is not None:
        typer.echo(f"stopped by {report.stopped_by}: no invariant broken in the runs before")
        raise typer.Exit(report.stopped_exit or EXIT_CODES["aborted"])
    if violating is None:
        typer.echo("no invariant broken")
        raise typer.Exit(0)
    ops = violating.out_dir / "history.jsonl"
    typer.echo(f"violation in run {violating.index} (seed {violating.seed}) after "
               f"{report.found_after_s:.0f}s; history: {ops}")  # fmt: skip
    typer.echo(f"replay: {replay_command(file, violating.seed)}")
    if report.shrunk is not None and report.shrunk_file is not None:
        typer.echo(f"shrunk to {len(report.shrunk)} fault(s) in {report.shrink_runs} runs: "
                   + "; ".join(f"{f.kind} {f.select} at {f.at:g}s for {f.duration}s"
                               for f in report.shrunk))  # fmt: skip
        typer.echo(f"replay the shrunk schedule: {replay_command(report.shrunk_file)}")
    raise typer.Exit(1)
