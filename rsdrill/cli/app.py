"""The `rsdrill` entry point.

Nothing heavy (pymongo, the launcher) is imported here or at the top of the command modules:
`rsdrill --help` must answer at once.
"""

from typing import Annotated

import typer

from rsdrill.cli import (
    audit,
    check,
    experiment,
    faultfs,
    fleet,
    history,
    replay,
    report,
    run,
    sandbox,
    schedule,
    soak,
)
from rsdrill.cli.group import RsdrillGroup
from rsdrill.cli.interrupt import interrupt_raises
from rsdrill.version import __version__

app = typer.Typer(
    name="rsdrill",
    cls=RsdrillGroup,  # help metavars and --json usage errors, for every command (cli/group.py)
    help="Chaos experiments for MongoDB replica sets, with failover and recovery measured.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion for bash, zsh, fish
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # click's plain help: typer's Rich formatter doubles the start-up
)
app.command()(experiment.validate)
app.command()(experiment.plan)
app.command()(experiment.schema)
app.command()(experiment.faults)
app.add_typer(sandbox.app, name="sandbox")
app.command()(check.check)
app.command()(audit.audit)
app.command()(run.run)
app.command()(run.recover)
app.command()(soak.soak)
app.add_typer(history.app, name="history")
app.add_typer(report.app, name="report")
app.command()(replay.replay)
app.add_typer(replay.timeline_app, name="timeline")
app.add_typer(faultfs.app, name="faultfs")
app.add_typer(schedule.app, name="schedule")
app.add_typer(fleet.app, name="lever")


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"rsdrill {__version__}")
        raise typer.Exit()


# Commands that build nothing until the runner takes SIGINT over: Ctrl-C before then ends them
# at once (cli/interrupt.py); a KeyboardInterrupt could be dropped by a library while they load.
QUIET_UNTIL_RUN = frozenset({"run", "replay"})


@app.callback()
def _root(
    ctx: typer.Context,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version."
        ),
    ] = False,
) -> None:
    """Chaos experiments for MongoDB replica sets, with failover and recovery measured."""
    if ctx.invoked_subcommand not in QUIET_UNTIL_RUN:
        interrupt_raises()


if __name__ == "__main__":  # `python -m rsdrill.cli.app`, as `python -m rsdrill.cli`
    app()
