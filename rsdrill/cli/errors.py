"""How the command line reports a refusal: one line on stderr, exit status 2, nothing done."""

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

if TYPE_CHECKING:
    from rsdrill.experiment.schema import Experiment

EXIT_INVALID = 2


def exit_invalid(message: str) -> NoReturn:
    typer.echo(message, err=True)
    raise typer.Exit(EXIT_INVALID)


@contextmanager
def sandbox_errors() -> Iterator[None]:
    """Turn the sandbox launcher's errors into one line on stderr and its exit status."""
    from rsdrill.sandbox.errors import SandboxError

    try:
        yield
    except SandboxError as exc:
        typer.echo(f"rsdrill: {exc}", err=True)
        raise typer.Exit(exc.exit_code) from None


JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]

SeedOption = Annotated[
    int | None,
    typer.Option(
        "--seed",
        min=0,
        help="Draw the random schedule (faults: {random}) from this seed: "
        "the same seed, the same faults.",
    ),
]


def seeded(experiment: "Experiment", seed: int | None) -> "Experiment":
    """The experiment drawn with `--seed` (exit 2 when it has no random schedule)."""
    if seed is None:
        return experiment
    try:
        return experiment.with_seed(seed)
    except ValueError as exc:
        exit_invalid(str(exc))
