"""Every command's --help reads cleanly: an optional argument is bracketed once (typer adds the
brackets; a metavar that had its own gave `replay [[TIMELINE]]`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from rsdrill.cli.app import app


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
