"""`rsdrill replay` (an incident timeline, or a previous run's faults, run again) and
`rsdrill timeline from-mongod-log` (a timeline derived from mongod's JSON log).

pydantic, PyYAML and the engine are imported inside each command so that `rsdrill --help`
stays fast.
"""

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from rsdrill.cli.errors import exit_invalid, ready_out_dir, write_out
from rsdrill.cli.run import HistoryOption, LiveOption, NoHistoryOption, YesOption

if TYPE_CHECKING:
    from rsdrill.experiment.schema import Target
    from rsdrill.experiment.timeline import Timeline

Topology = Literal["rs1", "rs3", "psa"]

timeline_app = typer.Typer(
    help="Incident timelines: derive one from logs.", no_args_is_help=True, rich_markup_mode=None
)


def replay(
    timeline: Annotated[
        Path | None, typer.Argument(help="The timeline file (YAML).", metavar="TIMELINE")
    ] = None,
    from_result: Annotated[
        Path | None,
        typer.Option(
            "--from",
            metavar="RESULT",
            help="Replay a previous run's fault sequence, from its result.json, instead.",
        ),
    ] = None,
    target_file: Annotated[
        Path | None,
        typer.Option(
            "--target-file", metavar="EXPERIMENT", help="Run against this experiment's target."
        ),
    ] = None,
    topology: Annotated[
        Topology | None,
        typer.Option(help="Run against a fresh sandbox of this topology."),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", help="Where the results go (default: rsdrill-results/<name>-<time>)."
        ),
    ] = None,
    live: LiveOption = True,
    yes: YesOption = False,
    history: HistoryOption = None,
    no_history: NoHistoryOption = False,
) -> None:
    """Replay an incident timeline, or (--from) a previous run's faults: same kinds, offsets,
    durations and roles, against a fresh set. Exit statuses as `rsdrill run`."""
    from pydantic import ValidationError

    from rsdrill.cli.check import refuse_unless_checked
    from rsdrill.cli.fleet import holding
    from rsdrill.cli.run import default_out_dir, history_location, run_and_report, run_options

    if (timeline is None) == (from_result is None):
        exit_invalid("replay: give a TIMELINE file or --from RESULT (one of them)")
    if target_file is not None and topology is not None:
        exit_invalid("replay: --target-file or --topology, not both")
    target = _target(target_file, topology)
    try:
        if timeline is not None:
            plan = _load_timeline(timeline)
            if target is not None:
                plan = type(plan).model_validate({**dict(plan), "target": target})
        else:
            assert from_result is not None
            plan = _from_result(from_result, target)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        exit_invalid(f"replay: this target does not fit the timeline: {first['msg']}")
    experiment = plan.to_experiment()
    if from_result is not None:
        judged = ", ".join(f"{m} {c}" for m, c in experiment.slo.items())
        none = "the original run had no SLO: the replay reports its metrics only"
        typer.echo(f"judged by the original run's SLOs: {judged}" if judged else none)
    out_dir = out or default_out_dir(experiment.name)
    ready_out_dir(out_dir)
    recorded_in = history_location(history, no_history)
    options = run_options(experiment, out_dir, live, [], yes, history)
    with holding(options.gate):
        refuse_unless_checked(experiment)
        out_dir.mkdir(parents=True, exist_ok=True)
        # What was replayed, as a file one can edit and replay again.
        (out_dir / "timeline.yaml").write_text(plan.to_yaml())
        run_and_report(experiment, options, recorded_in)


def _target(target_file: Path | None, topology: Topology | None) -> "Target | None":
    from rsdrill.experiment.loader import ExperimentError, load_experiment
    from rsdrill.experiment.schema import Target

    if topology is not None:
        return Target(platform="sandbox", topology=topology)
    if target_file is None:
        return None
    try:
        return load_experiment(target_file).target
    except ExperimentError as exc:
        exit_invalid(str(exc))


def _load_timeline(path: Path) -> "Timeline":
    from rsdrill.experiment.loader import ExperimentError, load_document
    from rsdrill.experiment.timeline import Timeline

    try:
        return load_document(Timeline, path)
    except ExperimentError as exc:
        exit_invalid(str(exc))


def _from_result(path: Path, target: "Target | None") -> "Timeline":
    from rsdrill.experiment.schema import Target
    from rsdrill.experiment.timeline import ReplayError, timeline_from_result
    from rsdrill.result import ResultFileError, read_result

    try:
        result = read_result(path)
    except ResultFileError as exc:
        exit_invalid(str(exc))
    topology = result.target.topology
    if target is None:
        if topology not in ("rs1", "rs3", "psa"):
            exit_invalid(f"{path}: topology {topology!r}: say which set to use (--topology)")
        # A result's topology is any text: the model validates it.
        target = Target.model_validate({"platform": "sandbox", "topology": topology})
    try:
        return timeline_from_result(result, target)
    except ReplayError as exc:
        exit_invalid(f"{path}: {exc}")


@timeline_app.command("from-mongod-log")
def from_mongod_log(
    logfiles: Annotated[
        list[Path],
        typer.Argument(
            help="mongod JSON log files (4.4+; rotated, gzipped), each member's or merged.",
            metavar="LOG",
        ),
    ],
    member: Annotated[
        str | None,
        typer.Option(
            help="The member whose log this is, when it does not say (no 'Found self in "
            "config' line, no `host` field)."
        ),
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Write the timeline here (default: stdout).")
    ] = None,
    name: Annotated[str | None, typer.Option(help="The timeline's name.")] = None,
    topology: Annotated[
        Topology | None,
        typer.Option(help="The sandbox to replay on (default: psa if an arbiter shows, rs3)."),
    ] = None,
) -> None:
    """Derive an incident timeline (primary lost, stepdowns) from mongod's JSON log; the rules
    are in rsdrill/experiment/mongodlog.py."""
    from rsdrill.experiment.mongodlog import (
        MongodLogError,
        derive_timeline,
        read_incident,
        timeline_name,
    )
    from rsdrill.experiment.schema import Target

    try:
        events, clocks = read_incident(logfiles, member)
        arbiter = any(e.new == "ARBITER" for e in events)
        target = Target(platform="sandbox", topology=topology or ("psa" if arbiter else "rs3"))
        described = f"derived from mongod logs{clocks}"
        plan = derive_timeline(events, name or timeline_name(logfiles[0]), target, described)
    except MongodLogError as exc:
        exit_invalid(str(exc))
    text = plan.to_yaml()
    if out is None:
        typer.echo(text, nl=False)
        return
    write_out(out, text)
    typer.echo(f"{out}: {len(plan.events)} events")
