"""`rsdrill run` and `rsdrill recover`."""

import datetime as dt
import shutil
import signal
import threading
import time
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from rsdrill.cli.check import refuse_unless_checked
from rsdrill.cli.errors import SeedOption, exit_invalid, ready_out_dir, ready_out_file, seeded
from rsdrill.cli.fleet import holding
from rsdrill.cli.interrupt import exit_on_interrupt

if TYPE_CHECKING:
    from rsdrill.engine.console import GameDayConsole
    from rsdrill.engine.journal import Journal, Pending
    from rsdrill.engine.options import RunOptions
    from rsdrill.experiment.schema import Experiment

RESULTS_DIR = Path("rsdrill-results")
HISTORY_DB = RESULTS_DIR / "history.sqlite"

# Options `run` and `replay` share.
LiveOption = Annotated[bool, typer.Option(help="Show the live view on the terminal.")]
YesOption = Annotated[
    bool,
    typer.Option("--yes", "-y", help="Do not ask before breaking a set not in RSDRILL_ALLOW."),
]
HistoryOption = Annotated[
    str | None,
    typer.Option(
        "--history",
        envvar="RSDRILL_HISTORY",
        metavar="PATH|URL",
        help="Record the run in this history: a SQLite file (default "
        "rsdrill-results/history.sqlite) or a shared mongodb:// store, which then "
        "also holds the fleet's stop lever and leases.",
    ),
]
LeaseWaitOption = Annotated[
    float,
    typer.Option(
        "--lease-wait",
        metavar="SECONDS",
        min=0,
        help="Wait this long for another run on the same cluster to end (default: "
        "exit 3 at once, naming it).",
    ),
]
# How long `recover` waits for another recover (or --forget) holding a journal's lock. A
# forget, or a recover with nothing slow left to do, is done within a second: the one waiting
# then finds the work done and exits 0 instead of failing a nightly job for a colleague's
# forget. A revert can take minutes (a member's restart waits up to a minute for its hello):
# an operator is then better told at once, exit 2, that another recover is at it (it does what
# this one would) than left before a silent terminal.
LOCK_WAIT_S = 10.0
NoHistoryOption = Annotated[
    bool, typer.Option("--no-history", help="Do not record the run in the history.")
]
MetricsFileOption = Annotated[
    Path | None,
    typer.Option(
        "--metrics-file",
        envvar="RSDRILL_METRICS_FILE",
        dir_okay=False,
        help="Write the run's metrics here for node-exporter's textfile collector (*.prom).",
    ),
]
MetricsPushOption = Annotated[
    str | None,
    typer.Option(
        "--metrics-push",
        envvar="RSDRILL_METRICS_PUSH",
        metavar="URL",
        help="Push the run's metrics to this Prometheus Pushgateway (job rsdrill, grouped by "
        "experiment).",
    ),
]

NotifyOption = Annotated[
    list[str] | None,
    typer.Option(
        "--notify",
        metavar="KIND=URL",
        help="Also tell this place of the run's start and verdict, as a `notify:` entry of "
        "the file would (KIND: webhook or slack; repeatable).",
    ),
]


def with_notifications(experiment: "Experiment", given: list[str]) -> "Experiment":
    """The experiment with `--notify KIND=URL` entries added to its `notify:` (exit 2 on one
    that is not valid, naming it)."""
    from pydantic import ValidationError

    from rsdrill.experiment.integrations import Notification

    added = []
    for text in given:
        kind, sep, url = text.partition("=")
        if not sep or kind not in ("webhook", "slack"):
            exit_invalid(
                f"--notify {text}: give KIND=URL, KIND webhook or slack (PagerDuty needs "
                "its routing key's variable: use `notify:` in the file)"
            )
        try:
            added.append(Notification.model_validate({"kind": kind, "url": url}))
        except ValidationError as exc:
            problem = exc.errors()[0]
            exit_invalid(f"--notify {kind}=...: {'.'.join(map(str, problem['loc']))}: "
                         f"{problem['msg']}")  # fmt: skip
    return experiment.model_copy(update={"notify": (*experiment.notify, *added)})


def run(
    file: Annotated[Path, typer.Argument(help="The experiment file (YAML).")],
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Where result.json, junit.xml, report.html go "
            "(default: rsdrill-results/<experiment>-<time>).",
        ),
    ] = None,
    live: LiveOption = True,
    abort_on: Annotated[
        list[str] | None,
        typer.Option(
            "--abort-on",
            metavar="CONDITION",
            help='Abort (revert everything, exit 3) when this holds, e.g. "no_primary_s > 30"; '
            "repeatable, on top of the file's abort_on.",
        ),
    ] = None,
    yes: YesOption = False,
    history: HistoryOption = None,
    no_history: NoHistoryOption = False,
    lease_wait: LeaseWaitOption = 0.0,
    metrics_file: MetricsFileOption = None,
    metrics_push: MetricsPushOption = None,
    interactive: Annotated[
        bool,
        typer.Option(
            "--interactive",
            "-i",
            help="Game day: confirm each fault before it goes in; press r to revert the "
            "faults in force early, a to abort. Needs a terminal.",
        ),
    ] = False,
    seed: SeedOption = None,
    notify: NotifyOption = None,
) -> None:
    """Run an experiment: exit 0 all SLOs held, 1 an SLO failed, 2 invalid input, 3 aborted,
    4 a platform or internal error, 5 stopped (or not started) by the fleet's stop lever."""
    # Loading, checking and planning change nothing: Ctrl-C ends them at once, until the
    # runner puts its own handler (revert, then report) in place.
    exit_on_interrupt()
    from rsdrill.experiment.loader import ExperimentError, load_experiment

    try:
        experiment = load_experiment(file)
    except ExperimentError as exc:
        exit_invalid(str(exc))
    experiment = seeded(experiment, seed)
    if notify:
        experiment = with_notifications(experiment, notify)
    out_dir = out or default_out_dir(experiment.name)
    ready_out_dir(out_dir)
    recorded_in = history_location(history, no_history)
    if metrics_file is not None:
        ready_out_file(metrics_file, "--metrics-file")
    options = run_options(experiment, out_dir, live, abort_on or [], yes, history, lease_wait)
    with holding(options.gate):  # a cluster another run is breaking is not even checked
        refuse_unless_checked(experiment)
        if interactive:
            options.console = _game_day_console(experiment)
        if metrics_file is not None or metrics_push is not None:
            from rsdrill.report.openmetrics import MetricsExport, MetricsExportError, require_client

            try:
                require_client()  # asked for, so missing is bad input: before anything is run
            except MetricsExportError as exc:
                exit_invalid(str(exc))
            options.plugins = (*options.plugins, MetricsExport(metrics_file, metrics_push))
        if experiment.matrix is not None:
            _run_matrix(experiment, options)
        run_and_report(experiment, options, recorded_in)


def history_location(history: str | None, no_history: bool) -> str | None:
    """Where the run is to be recorded (None: nowhere). A SQLite file that could not be
    written is refused (exit 2) before anything starts: found once the run was over, the run
    went unrecorded."""
    from rsdrill.store import is_shared, sqlite_path

    if no_history:
        return None
    location = history or str(HISTORY_DB)
    if not is_shared(location):
        ready_out_file(sqlite_path(location), "--history")
    return location


def _game_day_console(experiment: "Experiment") -> "GameDayConsole":
    """The terminal that confirms each fault; `--interactive` without one exits 2."""
    import sys

    from rsdrill.engine.console import GameDayConsole

    if not sys.stdin.isatty():
        exit_invalid("--interactive needs a terminal to ask on (stdin is not one)")
    if experiment.matrix is not None:
        exit_invalid("--interactive runs one experiment, not a matrix of them")
    return GameDayConsole(sys.stdin.fileno(), sys.stderr)


_DEFAULT_DIRS: set[Path] = set()  # given by default_out_dir: a run of the same second takes -2


def default_out_dir(name: str) -> Path:
    """Where a run's results go unless `--out` says: a new directory per run."""
    path = RESULTS_DIR / f"{name}-{dt.datetime.now():%Y%m%d-%H%M%S}"
    _DEFAULT_DIRS.add(path)
    return path


def claim_out_dir(options: "RunOptions") -> None:
    """Hold the run's results directory (rsdrill.engine.outdir), or exit 2 when another run
    is writing there. Called once nothing can refuse the run any more: a refused run
    creates nothing."""
    from rsdrill.engine.outdir import OutDirBusy, claim, claim_new

    try:
        fresh = options.out_dir in _DEFAULT_DIRS
        options.out_dir = (claim_new if fresh else claim)(options.out_dir)
    except OutDirBusy as exc:
        exit_invalid(f"--out {exc}")
    except OSError as exc:
        exit_invalid(f"--out {options.out_dir}: cannot create it: {exc.strerror or exc}")


def run_and_report(
    experiment: "Experiment",
    options: "RunOptions",
    history: str | None,
) -> NoReturn:
    """Run, print the verdicts, record the run in `history` (None: not recorded), exit with
    the result's status."""
    from rsdrill.engine.runner import run_experiment
    from rsdrill.report import ReportError

    claim_out_dir(options)
    out_dir = options.out_dir
    unwritten = None
    try:
        result = run_experiment(experiment, options)
    except ReportError as exc:  # a full disk: the verdict is said, the exit status is 4
        result, unwritten = exc.result, exc
    if threading.current_thread() is threading.main_thread():
        # Every fault is reverted and the result written: an interrupt now could only cost
        # the summary below, so it is ignored.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    typer.echo(
        f"{experiment.name}: {result.verdict.upper()}"
        + (f" ({result.error})" if result.error else "")
    )
    from rsdrill.report.common import (
        audit_lines,
        describe_server,
        recovery_lines,
        slo_observed,
        slo_outcome,
        slo_title,
        stall_line,
    )

    marks = {"pass": "ok  ", "FAIL": "FAIL", "not judged": "--  "}
    outcomes = [slo_outcome(result, slo) for slo in result.slo]
    for slo, outcome in zip(result.slo, outcomes, strict=True):
        typer.echo(f"  {marks[outcome]} {slo_title(slo)} (observed {slo_observed(slo)})")
    if "not judged" in outcomes:
        typer.echo("  (--: not judged, the run stopped before its measurement ended)")
    if (stalled := stall_line(result.metrics)) is not None:
        typer.echo(stalled)
    for line in (*recovery_lines(result), *audit_lines(result)):
        typer.echo(line)
    if result.target.server is not None:
        typer.echo(f"measured on: {describe_server(result.target.server)}")
    if unwritten is not None:
        typer.echo(f"rsdrill: {unwritten}; the run's reports are incomplete", err=True)
        raise typer.Exit(4)  # CI must not take a run without its junit.xml for a pass
    typer.echo(f"report: {out_dir / 'report.html'}")
    if history is not None:
        from rsdrill.store import StoreError, record_at

        try:
            record_at(result, out_dir, history)
        except StoreError as exc:  # the verdict stands: a history problem must not change it
            typer.echo(f"history: not recorded: {exc} (the result is in {out_dir}: add it "
                       f"later with rsdrill history push {out_dir})", err=True)  # fmt: skip
    raise typer.Exit(result.exit_code)


def run_options(
    experiment: "Experiment",
    out_dir: Path,
    live: bool,
    abort_on: list[str],
    yes: bool,
    history: str | None,
    lease_wait_s: float = 0.0,
) -> "RunOptions":
    """The run's options; an `--abort-on` that cannot be parsed or measured exits 2, as a
    fleet store that cannot be used does (rsdrill.cli.fleet.fleet_gate), and an engaged stop
    lever exits 5."""
    import sys

    from rsdrill.analysis.abort import parse_condition, unmeasurable
    from rsdrill.cli.fleet import fleet_gate
    from rsdrill.engine.options import RunOptions

    for text in abort_on:
        try:
            problem = unmeasurable(parse_condition(text).metric, experiment.probes.records())
        except ValueError as exc:
            problem = str(exc)
        if problem:
            exit_invalid(f"--abort-on: {problem}")
    return RunOptions(
        out_dir=out_dir,
        live=live,
        abort_on=tuple(abort_on),
        assume_yes=yes,
        confirm=_confirm if sys.stdin.isatty() else None,
        gate=fleet_gate(experiment, history, lease_wait_s),
    )


def _confirm(question: str) -> bool:
    try:
        return typer.confirm(question, default=False)
    except typer.Abort:  # Ctrl-C or end of input at the prompt
        return False


def _run_matrix(experiment: "Experiment", options: "RunOptions") -> NoReturn:
    from rsdrill.engine.sweep import exit_code, run_sweep, write_summary

    claim_out_dir(options)
    cells = run_sweep(experiment, options)
    for cell in cells:
        params = ", ".join(f"{k}={v}" for k, v in cell.parameters.items())
        typer.echo(
            f"{params}: {cell.result.verdict.upper()}"
            + (f" ({cell.result.error})" if cell.result.error else "")
        )
    assert experiment.matrix is not None
    typer.echo("")
    typer.echo(write_summary(cells, experiment.matrix.table, options.out_dir))
    typer.echo(f"\nresults: {options.out_dir}")
    raise typer.Exit(exit_code(cells))


def _keep_reverting(signum: int, frame: FrameType | None) -> None:
    typer.echo("recover: reverting; rsdrill exits once everything is restored", err=True)


def recover(
    dry_run: Annotated[
        bool, typer.Option(help="Say what would be reverted; change nothing.")
    ] = False,
    force: Annotated[
        bool, typer.Option(help="Also finish journals whose run still seems to be alive.")
    ] = False,
    uri: Annotated[
        str | None,
        typer.Option(
            "--uri",
            envvar="RSDRILL_RECOVER_URI",
            help="The set's connection string, password included, for reverts that must log "
            "in (a fail point, a clock): the journal keeps its TLS settings but no secret. "
            "Also read from $RSDRILL_RECOVER_URI (kept off the process list).",
        ),
    ] = None,
    forget: Annotated[
        str | None,
        typer.Option(
            "--forget",
            metavar="KEY",
            help="Give up one owed revert instead (its member gone for good: a deleted VM or "
            "pod): journal it as forgotten, by you, now; revert nothing. KEY as recover shows "
            "it in brackets.",
        ),
    ] = None,
    lock_wait: Annotated[
        float,
        typer.Option(
            "--lock-wait",
            metavar="SECONDS",
            min=0,
            help="Wait this long for another recover (or --forget) working on the same journal "
            "to finish; still held: exit 2, nothing done.",
        ),
    ] = LOCK_WAIT_S,
) -> None:
    """Revert whatever a dead run left behind (faults in force, its sandbox), from the journal.
    Running it again finds nothing to do."""
    from rsdrill.connection import ConnectOptions, SettingsError
    from rsdrill.engine.journal import journal_dir, pending, process_alive, unfinished
    from rsdrill.opcolumns import spills_left

    given = None
    if uri is not None:
        try:
            given = ConnectOptions.from_uri(uri)
        except SettingsError as exc:
            exit_invalid(f"--uri: {exc}")

    owed = pending()
    if forget is not None:
        _forget(forget, owed, dry_run=dry_run, force=force, lock_wait=lock_wait)
        return
    todo = [p for p in owed if force or not process_alive(p.pid)]
    # Every journal locked before anything is done: one another recover (or --forget) holds is
    # waited for, or the call refused with nothing done.
    claimed = {} if dry_run or not todo else _claim([p.path for p in todo], lock_wait)
    for p in owed:
        if p not in todo:
            typer.echo(
                f"{p.run} ({p.experiment}): still running as pid {p.pid}; skipped (use --force)"
            )
    # A run killed outright leaves the history it had spilled to disk (gigabytes after hours).
    spilled = [(path, pid) for path, pid in spills_left() if not process_alive(pid)]
    for path, pid in spilled:
        if not dry_run:
            shutil.rmtree(path, ignore_errors=True)
        typer.echo(f"{'would remove' if dry_run else 'removed'} the history a dead run "
                   f"(pid {pid}) spilled to disk: {path}")  # fmt: skip
    if not todo:
        if not spilled:
            typer.echo(f"nothing to recover (journals in {journal_dir()})")
        return
    # Only now: what carries the reverts out imports every platform (most calls find nothing).
    from rsdrill.engine.actions import carry_out, describe
    from rsdrill.engine.forget import Owed, handle, owed_reverts
    from rsdrill.platforms.base import TargetError

    if not dry_run:
        # Ctrl-C must not leave a revert half done: say so and carry on.
        signal.signal(signal.SIGINT, _keep_reverting)
    failed = False
    everything = owed_reverts(owed)
    for read in todo:
        # Read again under the lock: what another recover or forget settled meanwhile is done.
        now = read if dry_run else unfinished(read.path)
        if now is None:
            claimed[read.path].close()
            typer.echo(f"{read.run} ({read.experiment}): finished meanwhile by another "
                       "recover; nothing to do")  # fmt: skip
            continue
        typer.echo(f"{now.run} ({now.experiment}):")
        journal = claimed.get(now.path)
        owes = False  # this run's: another run's failure must not keep this one open
        for key, action in now.actions:
            # The handle `--forget` takes, on every line that names a revert.
            name = f"[{handle(Owed(now, key, action), everything)}]"
            if dry_run:
                typer.echo(f"  {name} would {describe(action)}")
                continue
            try:
                typer.echo(f"  {name} {carry_out(action, given)}")
                assert journal is not None
                journal.write("released" if key.startswith("resource:") else "reverted", key=key)
            except TargetError as exc:
                failed = owes = True
                typer.echo(f"  FAILED {name} {exc}", err=True)
                typer.echo(f"  (its host gone for good? give it up: rsdrill recover --forget "
                           f"{name[1:-1]})", err=True)  # fmt: skip
        if journal is not None:
            if not owes:
                journal.write("end", verdict="recovered")
            journal.close()
    if failed:
        raise typer.Exit(4)


def _say(line: str) -> None:
    typer.echo(f"recover: {line}", err=True)


def _busy(path: Path, waited_s: float) -> NoReturn:
    exit_invalid(f"recover: {path}: another rsdrill recover holds it (waited "
                 f"{round(waited_s, 1):g}s); nothing done: run it again once that one is done, "
                 "or wait longer with --lock-wait")  # fmt: skip


def _claim(paths: list[Path], wait_s: float) -> "dict[Path, Journal]":
    """Each journal opened and locked (`Journal.lock`) within `wait_s` in all, or exit 2 with
    none held and nothing done. Released by `close`, or the process's end."""
    from rsdrill.engine.journal import Journal, JournalBusy

    deadline = time.monotonic() + wait_s
    held: dict[Path, Journal] = {}
    try:
        for path in paths:
            held[path] = Journal(path, create=False)
            held[path].lock(max(0.0, deadline - time.monotonic()), _say)
    except JournalBusy as busy:
        for journal in held.values():
            journal.close()
        _busy(busy.path, wait_s)
    except OSError as exc:  # a read-only journal: its reverts could not be journaled
        for journal in held.values():
            journal.close()
        exit_invalid(f"recover: cannot write {path}: {exc.strerror or exc}; nothing done")
    return held


def _forget(ident: str, owed: "list[Pending]", *, dry_run: bool, force: bool,
            lock_wait: float) -> None:  # fmt: skip
    """`recover --forget KEY`: journal one owed revert as given up; revert nothing."""
    from rsdrill.engine.actions import describe
    from rsdrill.engine.forget import ForgetRefused, find, forget, settled, unknown
    from rsdrill.engine.journal import JournalBusy
    from rsdrill.fleet.lever import who

    try:
        found = find(ident, owed, force=force)
    except ForgetRefused as exc:
        exit_invalid(str(exc))
    if found is None:
        done = settled(ident)
        if done is None:
            exit_invalid(unknown(ident, owed))
        # Idempotent, as recover is: what was asked (nothing owed under KEY) already holds.
        typer.echo(f"{done}; nothing to forget")
        return
    run = f"{found.pending.run} ({found.pending.experiment})"
    what = f"[{found.key}] {describe(found.action)}"
    if dry_run:
        typer.echo(f"{run}:\n  would forget {what}: not reverted, no longer owed")
        return
    by = who()
    try:
        rest = forget(found, by, lock_wait, _say)
    except JournalBusy as busy:
        _busy(busy.path, busy.waited_s)
    except OSError as exc:  # a read-only journal
        exit_invalid(f"recover: cannot write {found.pending.path}: {exc.strerror or exc}")
    if rest is None:
        # Settled meanwhile (read again under the journal's lock): a recover reverted it, or
        # another forget gave it up. What was asked holds, as when it was settled before.
        done = settled(f"{found.pending.run}/{found.key}")
        typer.echo(f"{done or f'{found.key} (run {found.pending.run}): no longer owed'}; "
                   "nothing to forget")  # fmt: skip
        return
    typer.echo(f"{run}:\n  forgot {what}: not reverted, no longer owed (journaled as given "
               f"up by {by})")  # fmt: skip
    if rest:
        typer.echo(f"  still owed: {', '.join(rest)} (rsdrill recover reverts them)")
