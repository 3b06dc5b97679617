"""The root command group: what typer builds for every command, put right once for all of them.

- A parameter that takes many values reads `FILE...` (an argument) or `--db DB` (a repeatable
  option) in --help: typer 0.29 adds its type label, `FILE <list[Path]>`, to every argument.
- A usage error (unknown option, missing argument, bad value) of a command line holding --json
  is the JSON refusal the command's other refusals are (cli/errors.py), exit status 2 kept:
  Click printed it as text, and a CI job parsing stdout found nothing. It is caught where the
  root parses and invokes, before any parameter is bound, so --json is read from the raw
  command line, wherever it stands in it.
A password an error echoes (a URI given as a value that was refused) is masked either way.
"""

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

# typer (0.29) runs its own copy of Click, not the `click` package: its exceptions are the ones
# raised, and typer exports no usage error of its own.
from typer._click import Command, Context
from typer._click.exceptions import NoArgsIsHelpError, UsageError
from typer.core import TyperArgument, TyperGroup, TyperOption

from rsdrill.cli.errors import refuse
from rsdrill.redact import redact_uri

_ARGV = "rsdrill.argv"  # the root's raw command line, in the context's meta


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


def _wants_json(argv: Sequence[str]) -> bool:
    """Whether the command line asks for JSON: --json among its options (not after `--`)."""
    options = argv[: argv.index("--")] if "--" in argv else argv
    return "--json" in options


@contextmanager
def _usage_errors(argv: Sequence[str]) -> Iterator[None]:
    """Usage errors, their echoed secrets masked, as the JSON refusal when `argv` has --json."""
    try:
        yield
    except NoArgsIsHelpError:
        raise  # the help of a command given nothing: not an error to report
    except UsageError as exc:
        if isinstance(exc.message, str):  # a refused value is quoted in it, a URI's password too
            exc.message = redact_uri(exc.message)
        if _wants_json(argv):
            refuse(exc.format_message(), exc.exit_code, as_json=True)
        raise


class RsdrillGroup(TyperGroup):
    """The `rsdrill` group (app.py's `cls`); its subcommands and groups are built before it."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        _tidy(self)

    def make_context(
        self, info_name: str | None, args: list[str], parent: Context | None = None,
        **extra: Any,
    ) -> Context:  # fmt: skip
        argv = tuple(args)  # parsing consumes `args`
        with _usage_errors(argv):
            ctx = super().make_context(info_name, args, parent, **extra)
        ctx.meta[_ARGV] = argv
        return ctx

    def invoke(self, ctx: Context) -> Any:
        # A subcommand's own arguments are parsed here, as is every nested group's.
        with _usage_errors(ctx.meta.get(_ARGV, ())):
            return super().invoke(ctx)
