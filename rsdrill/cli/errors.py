"""How the command line reports a refusal: one line on stderr, exit status 2, nothing done."""

from __future__ import annotations

from typing import NoReturn

import typer

EXIT_INVALID = 2


def exit_invalid(message: str) -> NoReturn:
    typer.echo(message, err=True)
    raise typer.Exit(EXIT_INVALID)
