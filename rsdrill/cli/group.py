"""The root command group: what typer builds for every command, put right once for all of them.

A parameter that takes many values reads `FILE...` (an argument) or `--db DB` (a repeatable
option) in --help: typer 0.29 adds its type label, `FILE <list[Path]>`, to every argument.
"""

from typing import Any

# typer (0.29) runs its own copy of Click, not the `click` package.
from typer._click import Command, Context
from typer.core import TyperArgument, TyperGroup, TyperOption


class _ManyValuesArgument(TyperArgument):
    """An argument taking many values, shown as its metavar and `...`, without a type label."""

    def _rich_display_name(self) -> str:
        return f"{self.display_name_raw}..."

    def display_type_rich(self, ctx: Context) -> str | None:
        return None


def _tidy(command: Command) -> None:
    """Give every many-valued parameter of `command` and its subcommands a plain metavar."""
    for param in command.params:
        if isinstance(param, TyperArgument) and param.nargs == -1:
            param.metavar = param.metavar or (param.name or "").upper()
            # typer builds its parameters itself, with no hook for their class: swapped here
            param.__class__ = _ManyValuesArgument
        elif isinstance(param, TyperOption) and param.multiple and param.metavar is None:
            param.metavar = max(param.opts, key=len).lstrip("-").upper()
    for sub in getattr(command, "commands", {}).values():
        _tidy(sub)


class RsdrillGroup(TyperGroup):
    """The `rsdrill` group (app.py's `cls`); its subcommands and groups are built before it."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        _tidy(self)
