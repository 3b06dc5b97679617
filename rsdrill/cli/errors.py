"""How the command line reports a refusal: one line on stderr, exit status 2, nothing done."""

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

if TYPE_CHECKING:
    from rsdrill.experiment.schema import Experiment

EXIT_INVALID = 2


def exit_invalid(message: str) -> NoReturn:
    typer.echo(message, err=True)
    raise typer.Exit(EXIT_INVALID)


def _unusable(path: Path, exc: OSError) -> str:
    """Why `path` cannot be written or made a directory, naming the part in the way."""
    for part in (path, *path.parents):
        if part.exists() and not part.is_dir():
            return f"{part} is a file, not a directory"
    return str(exc.strerror or exc)


def ready_out_dir(path: Path, option: str = "--out") -> None:
    """Refuse (exit 2) a results directory that could not be made or written, before anything
    starts (a file in the way, no permission): found once the run is over, it was a traceback.
    Nothing is created: a refused run leaves no trace."""
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir():
        exit_invalid(f"{option} {path}: {existing} is a file, not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        exit_invalid(f"{option} {path}: {existing} is not writable by this user")


def write_out(path: Path, text: str, option: str = "--out") -> None:
    """Write an output file the user named (its directory made if missing), or refuse (exit 2)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        exit_invalid(f"{option}: cannot write {path}: {_unusable(path, exc)}")


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
