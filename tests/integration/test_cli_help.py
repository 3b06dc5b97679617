"""Every command's --help reads cleanly: an optional argument is bracketed once (typer adds the
brackets; a metavar that had its own gave `replay [[TIMELINE]]`), and a parameter taking many
values reads `FILE...` or `--db DB`, not typer 0.29's type label (`FILE <list[Path]>`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from rsdrill.cli.app import app
from tests.harness.cli import rsdrill_run


def _command_paths(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    yield path
    for name, sub in getattr(command, "commands", {}).items():
        yield from _command_paths(sub, (*path, name))


COMMANDS = list(_command_paths(typer.main.get_command(app)))


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "rsdrill")
def test_help_brackets_an_optional_argument_once(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(app, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert "[[" not in result.output and "]]" not in result.output, result.output


def test_replay_names_its_optional_timeline_in_its_usage() -> None:
    usage = CliRunner().invoke(app, ["replay", "--help"]).output.splitlines()[0]
    assert usage == "Usage: rsdrill replay [OPTIONS] [TIMELINE]"


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "rsdrill")
def test_help_shows_no_list_type(path: tuple[str, ...]) -> None:
    help_text = CliRunner().invoke(app, [*path, "--help"]).output
    assert "list[" not in help_text, help_text


@pytest.mark.parametrize(
    ("args", "row"),
    [
        (["validate"], "FILE...  Experiment files (YAML)."),
        (["schedule", "render"], "FILE...  Experiment files (YAML)."),
        (["history", "push"], "DIR...  Run directories (each with result.json)."),
        (["timeline", "from-mongod-log"], "LOG...  mongod JSON log files"),
        (["audit"], "--db DB "),
        (["history"], "--metric METRIC "),
        (["report", "fleet"], "--metric METRIC "),
    ],
)
def test_a_parameter_of_many_values_reads_as_its_metavar(args: list[str], row: str) -> None:
    """As a user reads it: the console script's own process."""
    shown = rsdrill_run([*args, "--help"], capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert any(line.strip().startswith(row) for line in shown.stdout.splitlines()), shown.stdout
