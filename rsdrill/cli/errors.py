"""How the command line reports a refusal: one line on stderr, exit status 2, nothing done.
Under --json (`json_errors`) the refusal is JSON on stdout instead, as `validate --json` gives
a file's problem: a CI job parsing the output gets the error too."""

import functools
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, ParamSpec, TypeVar

import typer

if TYPE_CHECKING:
    from rsdrill.experiment.problem import ExperimentError
    from rsdrill.experiment.schema import Experiment

# The result CONTRACT's exit status for invalid input (rsdrill.result.EXIT_CODES["invalid"]),
# repeated: that module imports pydantic, and `rsdrill --help` must answer at once.
EXIT_INVALID = 2
P = ParamSpec("P")
R = TypeVar("R")

# Whether the command running was given --json (set by `json_errors` for its duration only:
# typer's test runner runs many commands in one process).
_AS_JSON: ContextVar[bool] = ContextVar("rsdrill_json_errors", default=False)


def located(problem: "ExperimentError") -> dict[str, Any]:
    """A problem (or note) of a file as `validate --json` gives it."""
    return {
        "line": problem.line,
        "column": problem.col,
        "field": problem.field,
        "problem": problem.problem,
        "message": str(problem),
    }


def file_entry(file: str | None, notes: list[dict[str, Any]], error: dict[str, Any] | None
               ) -> dict[str, Any]:  # fmt: skip
    """One file's object in `validate --json`; a refusal under --json is one too."""
    return {"file": file, "ok": error is None, "notes": notes, "error": error}


def json_errors(command: Callable[P, R]) -> Callable[P, R]:
    """Make `command`'s refusals JSON on stdout when it is given --json (its `as_json`)."""

    @functools.wraps(command)
    def with_json_errors(*args: P.args, **kwargs: P.kwargs) -> R:
        token = _AS_JSON.set(bool(kwargs.get("as_json")))
        try:
            return command(*args, **kwargs)
        finally:
            _AS_JSON.reset(token)

    return with_json_errors


def refuse(
    message: str, status: int = EXIT_INVALID, file: str | None = None,
    where: dict[str, Any] | None = None, as_json: bool | None = None,
) -> NoReturn:  # fmt: skip
    """Stop the command with `status`, saying why: one line on stderr, or under --json the
    object `validate --json` gives a file with a problem (`where` in it: line, column, field;
    without, only the message), on stdout and nothing on stderr, as validate. `as_json` None:
    as the running command was given (its --json); a usage error comes before it runs."""
    if _AS_JSON.get() if as_json is None else as_json:
        error = where or {"line": None, "column": None, "field": None,
                          "problem": message, "message": message}  # fmt: skip
        typer.echo(json.dumps(file_entry(file, [], error), indent=2))
    else:
        typer.echo(message, err=True)
    raise typer.Exit(status)


def exit_invalid(message: str) -> NoReturn:
    refuse(message)


def exit_bad_file(problem: "ExperimentError") -> NoReturn:
    """Refuse a file that cannot be used (exit 2), located as `validate` locates it."""
    refuse(str(problem), file=problem.path, where=located(problem))


def _in_the_way(path: Path) -> str | None:
    """Why a directory cannot be made (or written in) at `path`: the nearest part of it that
    exists is a file or not writable. None when it can. Nothing is created."""
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir():
        return f"{existing} is a file, not a directory"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable by this user"
    return None


def ready_out_dir(path: Path, option: str = "--out") -> None:
    """Refuse (exit 2) a results directory that could not be made or written, before anything
    starts (a file in the way, no permission): found once the run is over, it was a traceback.
    Nothing is created: a refused run leaves no trace."""
    if (problem := _in_the_way(path)) is not None:
        exit_invalid(f"{option} {path}: {problem}")


def ready_out_file(path: Path, option: str) -> None:
    """Refuse (exit 2) an output file that could not be written, before anything starts: a
    directory there, a file in the way of its directory, no permission. Nothing is created."""
    if path.is_dir():
        problem: str | None = f"{path} is a directory"
    elif path.exists() and not os.access(path, os.W_OK):
        problem = f"{path} is not writable by this user"
    else:  # its directory too: files are replaced by a rename, SQLite keeps a journal beside
        problem = _in_the_way(path.parent)
    if problem is not None:
        exit_invalid(f"{option} {path}: {problem}")


def write_out(path: Path, text: str, option: str = "--out") -> None:
    """Write an output file the user named (its directory made if missing), or refuse (exit 2)."""
    ready_out_file(path, option)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        exit_invalid(f"{option} {path}: cannot write: {exc.strerror or exc}")


@contextmanager
def sandbox_errors() -> Iterator[None]:
    """Turn the sandbox launcher's errors into one line on stderr and its exit status."""
    from rsdrill.sandbox.errors import SandboxError

    try:
        yield
    except SandboxError as exc:
        refuse(f"rsdrill: {exc}", exc.exit_code)


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
