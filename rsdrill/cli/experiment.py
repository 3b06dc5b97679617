"""`rsdrill validate`, `rsdrill plan`, `rsdrill schema` and `rsdrill faults`: experiment files
checked and explained without running anything.

pydantic and PyYAML are imported inside each command so that `rsdrill --help` stays fast.
"""

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from rsdrill.cli.check import echo_flagged
from rsdrill.cli.errors import (
    EXIT_INVALID,
    JsonOption,
    SeedOption,
    exit_bad_file,
    exit_invalid,
    file_entry,
    json_errors,
    located,
    seeded,
    write_out,
)

if TYPE_CHECKING:
    from rsdrill.experiment.schema import Experiment

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"

FileArgument = Annotated[Path, typer.Argument(help="An experiment file (YAML).", metavar="FILE")]


def validate(
    files: Annotated[list[Path], typer.Argument(help="Experiment files (YAML).", metavar="FILE")],
    strict: Annotated[
        bool,
        typer.Option(
            "--strict",
            help="Require every ${VAR} the files use to be set (as `rsdrill run` does).",
        ),
    ] = False,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print one object per file (ok, its notes, or its problem's line, column, "
            "field and message) as a JSON list; the exit status is the same.",
        ),
    ] = False,
) -> None:
    """Check experiment files: `FILE: ok`, or the file's first problem as FILE:LINE:COL.

    Without --strict the environment is not needed: a ${VAR} left unset is a note on stderr
    (its value goes unchecked) and the file is still ok."""
    import rsdrill
    from rsdrill.experiment.loader import check_experiment_file

    checked: list[dict[str, Any]] = []
    for path in files:
        notes: list[rsdrill.ExperimentError] = []
        error: rsdrill.ExperimentError | None = None
        try:
            if strict:
                rsdrill.load(path)
            else:
                notes = check_experiment_file(path)
        except rsdrill.ExperimentError as exc:
            error = exc
        checked.append(file_entry(str(path), [located(note) for note in notes],
                                  None if error is None else located(error)))  # fmt: skip
        if as_json:
            continue
        for note in notes:
            typer.echo(f"note: {note}", err=True)
        typer.echo(f"{path}: ok" if error is None else str(error), err=error is not None)
    if as_json:
        typer.echo(json.dumps(checked, indent=2))
    if not all(c["ok"] for c in checked):
        raise typer.Exit(EXIT_INVALID)


@json_errors
def plan(file: FileArgument, seed: SeedOption = None, as_json: JsonOption = False) -> None:
    """Show what an experiment will do, to which member and when (nothing is run)."""
    import rsdrill
    from rsdrill.experiment.plan import ONE_WAY_MARK, plan_data

    experiment = seeded(_load_or_exit(file), seed)
    if as_json:
        typer.echo(json.dumps(plan_data(experiment), indent=2))
        return
    for line in rsdrill.plan(experiment).splitlines():
        echo_flagged(line, ONE_WAY_MARK in line)


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
        write_out(out, text)
        typer.echo(f"wrote {out}")


@json_errors
def faults(
    platform: Annotated[
        str | None,
        typer.Option(
            "--platform",
            help="Only this platform's ways (sandbox, local, kubernetes, "
            "ec2, vsphere): one row per way, with its engine, options and the "
            "privileges it needs.",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the spec as JSON.")] = False,
) -> None:
    """List the fault kinds: what each does, its own fields, and what each platform does
    (exactly, approximately: needs `approximate: true`, or one way only: needs `one_way: true`)."""
    from rsdrill.experiment.catalog import platform_names
    from rsdrill.experiment.faultdocs import fault_table, faults_json, platform_table, support_table

    if platform is not None and platform not in platform_names():
        exit_invalid(f"--platform: unknown platform {platform!r} (one of "
                     f"{', '.join(platform_names())})")  # fmt: skip
    if as_json:
        typer.echo(json.dumps(faults_json(platform), indent=2))
    elif platform is not None:
        typer.echo(platform_table(platform), nl=False)
    else:
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
    # `faults` is a list or `{random: ...}`, which is drawn into the list before validation;
    # `random_faults` is what the drawing leaves, not something a file says.
    spec = generated["properties"].pop("random_faults")
    listed = generated["properties"]["faults"]
    random = {"type": "object", "properties": {"random": _nullable_removed(spec)},
              "required": ["random"], "additionalProperties": False}  # fmt: skip
    generated["properties"]["faults"] = {"description": listed.pop("description", ""),
                                         "anyOf": [listed, random]}  # fmt: skip
    generated = _allow_references(generated)
    return {
        "$schema": JSON_SCHEMA_DIALECT,
        **generated,
        "title": "rsdrill experiment",
        "description": "A chaos experiment on a MongoDB replica set: target, probes, faults, "
        "observation and SLOs. Top-level keys starting with x- are ignored (for YAML anchors).",
    }


def _nullable_removed(node: dict[str, Any]) -> dict[str, Any]:
    """A field's schema without the `null` pydantic adds for an optional field."""
    options = [o for o in node.get("anyOf", []) if o.get("type") != "null"]
    return options[0] if len(options) == 1 else node


# A text holding a `${VAR}` (substituted when the file is loaded) may stand for any value.
ENV_REFERENCE_PATTERN = r"\$\{[A-Za-z_][A-Za-z0-9_]*(:-[^}]*)?\}"


def _allow_references(node: Any) -> Any:
    """`node` with every number and true/false also allowed as a text with a `${VAR}` in it
    (a file's `port: ${VSPHERE_PORT:-443}` is valid: the value comes from the environment)."""
    if isinstance(node, list):
        return [_allow_references(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = {key: _allow_references(value) for key, value in node.items()}
    if node.get("type") in ("integer", "number", "boolean"):
        return {"anyOf": [node, {"type": "string", "pattern": ENV_REFERENCE_PATTERN}]}
    return node


def _load_or_exit(path: Path) -> "Experiment":
    import rsdrill

    try:
        return rsdrill.load(path)
    except rsdrill.ExperimentError as exc:
        exit_bad_file(exc)
