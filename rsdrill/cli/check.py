"""`rsdrill check`: what a run needs, checked against the real target; nothing is injected."""

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from rsdrill.cli.errors import EXIT_INVALID, exit_bad_file, exit_invalid, json_errors

if TYPE_CHECKING:
    from rsdrill.engine.check import Check
    from rsdrill.experiment.schema import Experiment

MARKS = {True: "✔", False: "✘", None: "!"}


@json_errors
def check(
    file: Annotated[Path, typer.Argument(help="The experiment file (YAML).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the checks as JSON.")] = False,
) -> None:
    """Check everything a run of FILE needs against the real target, injecting nothing:
    members reachable (TLS, login), topology and version, the user's privileges, the platform's
    permissions and this machine's tools. Exit 0 if all hold, 2 otherwise."""
    from rsdrill.experiment.loader import ExperimentError, load_experiment

    try:
        experiment = load_experiment(file)
    except ExperimentError as exc:
        exit_bad_file(exc)
    checks = run_checks(experiment)
    from rsdrill.engine.check import failed

    if as_json:
        typer.echo(json.dumps({"ok": not failed(checks),
                               "checks": [c.to_dict() for c in checks]}, indent=2))  # fmt: skip
    else:
        for line in checks:
            echo_flagged(format_check(line), "one-way" in line.name)  # one-way faults in red
    if failed(checks):
        raise typer.Exit(EXIT_INVALID)


def run_checks(experiment: "Experiment") -> "list[Check]":
    import rsdrill
    from rsdrill.redact import redact_uri

    return [type(c)(c.name, c.ok, redact_uri(c.detail)) for c in rsdrill.check(experiment)]


def echo_flagged(text: str, flagged: bool) -> None:
    """A line, in red when `flagged` and colour is wanted (NO_COLOR unset, no-color.org; click
    drops it off a terminal). An unflagged line carries no escape: secho's reset code came on
    every line, NO_COLOR or not."""
    if flagged and not os.environ.get("NO_COLOR"):
        typer.secho(text, fg="red")
    else:
        typer.echo(text)


def format_check(line: "Check") -> str:
    return f"{MARKS[line.ok]} {line.name}: {line.detail}"


def refuse_unless_checked(experiment: "Experiment") -> None:
    """`rsdrill run`'s preflight: the failed checks on stderr and exit 2 before anything is
    built or injected."""
    from rsdrill.engine.check import failed

    bad = failed(run_checks(experiment))
    if bad:
        exit_invalid("\n".join(["check failed, nothing was injected:", *map(format_check, bad)]))
