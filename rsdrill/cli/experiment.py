"""`rsdrill validate`, `rsdrill plan`, `rsdrill schema` and `rsdrill faults`: experiment files
checked and explained without running anything.

pydantic and PyYAML are imported inside each command so that `rsdrill --help` stays fast.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from rsdrill.cli.errors import SeedOption, seeded

if TYPE_CHECKING:
    from rsdrill.experiment.schema import Experiment

# The result CONTRACT's exit status for invalid input (rsdrill.result.EXIT_CODES["invalid"]),
# repeated here because that module imports pydantic.
EXIT_INVALID = 2

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"

FileArgument = Annotated[Path, typer.Argument(help="An experiment file (YAML).", metavar="FILE")]


def validate(
    files: Annotated[list[Path], typer.Argument(help="Experiment files (YAML).", metavar="FILE")],
) -> None:
    """Check experiment files: `FILE: ok`, or the file's first problem as FILE:LINE:COL."""
    import rsdrill

    invalid = False
    for path in files:
        try:
            rsdrill.load(path)
        except rsdrill.ExperimentError as exc:
            typer.echo(str(exc), err=True)
            invalid = True
        else:
            typer.echo(f"{path}: ok")
    if invalid:
        raise typer.Exit(EXIT_INVALID)


def plan(file: FileArgument, seed: SeedOption = None) -> None:
    """Show what an experiment will do, to which member and when (nothing is run)."""
    import rsdrill

    typer.echo(rsdrill.plan(seeded(_load_or_exit(file), seed)), nl=False)


def schema(
    out: Annotated[
        Path | None,
        typer.Option("--out", dir_okay=False, help="Write it to this file instead of stdout."),
    ] = None,
) -> None:
    """Print the JSON Schema of experiment files, for editors.

    With the YAML language server (VS Code's YAML extension and others), put
    `# yaml-language-server: $schema=rsdrill-experiment.schema.json` at the top of a file.
    """
    text = json.dumps(experiment_json_schema(), indent=2) + "\n"
    if out is None:
        typer.echo(text, nl=False)
    else:
        out.write_text(text)
        typer.echo(f"wrote {out}")


def faults() -> None:
    """List the fault kinds: what each does, its own fields, and what each platform does."""
    from rsdrill.experiment.kinds import fault_table, support_table

    typer.echo(fault_table() + "\n" + support_table(), nl=False)


def experiment_json_schema() -> dict[str, Any]:
    """The JSON Schema of `Experiment`, with completion for SLO metric names."""
    from rsdrill.analysis.slo import metric_names
    from rsdrill.experiment.loader import EXTENSION_PREFIX
    from rsdrill.experiment.schema import Experiment

    generated = Experiment.model_json_schema()
    slo = generated["properties"]["slo"]
    # Listed for editors' completion; `recovery_s.<host:port>` stays allowed as an extra key.
    slo["properties"] = {name: slo["additionalProperties"] for name in metric_names()}
    generated["patternProperties"] = {f"^{EXTENSION_PREFIX}": {}}
    return {
        "$schema": JSON_SCHEMA_DIALECT,
        **generated,
        "title": "rsdrill experiment",
        "description": "A chaos experiment on a MongoDB replica set: target, probes, faults, "
        "observation and SLOs. Top-level keys starting with x- are ignored (for YAML anchors).",
    }


def _load_or_exit(path: Path) -> Experiment:
    import rsdrill

    try:
        return rsdrill.load(path)
    except rsdrill.ExperimentError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(EXIT_INVALID) from None
