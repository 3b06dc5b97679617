"""`rsdrill faultfs ...`: put a real mongod's data directory on the fault-injecting filesystem.

For `platform: local`: stop mongod, `rsdrill faultfs mount DBPATH DBPATH` (over itself, so
mongod's configuration stays as it is), start mongod again, and give the member
`faultfs: DBPATH` in the experiment. Storage faults and `power_loss` then act through it.
`rsdrill faultfs status DBPATH` shows its rules and counters; `unmount` when done (stop mongod
first: a busy mount is detached lazily and its daemon serves the open files until closed).
"""

import json
from pathlib import Path
from typing import Annotated

import typer

from rsdrill.cli.errors import exit_invalid

app = typer.Typer(
    help="The fault-injecting filesystem (FUSE) for a member's data directory.",
    no_args_is_help=True,
    rich_markup_mode=None,
)

EXIT_PLATFORM = 4
DirArgument = Annotated[Path, typer.Argument(file_okay=False)]


@app.command()
def mount(
    source: Annotated[Path, typer.Argument(help="The directory holding the data.")],
    mountpoint: Annotated[Path, typer.Argument(help="Where to mount it (may be SOURCE).")],
    state_dir: Annotated[
        Path | None,
        typer.Option("--state-dir", help="Log and state file (default: MOUNTPOINT/../.faultfs)."),
    ] = None,
    track_unsynced: Annotated[
        bool,
        typer.Option(
            "--power-loss/--no-power-loss",
            help="Track unsynced writes so that a power_loss host-kill drops them.",
        ),
    ] = True,
) -> None:
    """Mount SOURCE on MOUNTPOINT through faultfs; returns once it serves."""
    from rsdrill.faultfs.mount import FaultFSError
    from rsdrill.faultfs.mount import mount as do_mount

    for name, path in (("SOURCE", source), ("MOUNTPOINT", mountpoint)):
        if not path.is_dir():
            exit_invalid(f"{name}: {path} is not a directory")
    state = state_dir or mountpoint.absolute().parent / f".faultfs-{mountpoint.name}"
    try:
        done = do_mount(source, mountpoint, state, track_unsynced=track_unsynced)
    except FaultFSError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(EXIT_PLATFORM) from exc
    typer.echo(f"faultfs: {done.source} mounted on {done.mountpoint} (daemon {done.pid}, log "
               f"{state / 'faultfs.log'})")  # fmt: skip


@app.command()
def unmount(mountpoint: DirArgument) -> None:
    """Unmount MOUNTPOINT (lazily if busy) and stop its daemon; does nothing if not mounted."""
    from rsdrill.faultfs.mount import FaultFSError
    from rsdrill.faultfs.mount import unmount as do_unmount

    try:
        typer.echo(do_unmount(mountpoint))
    except FaultFSError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(EXIT_PLATFORM) from exc


@app.command()
def status(mountpoint: DirArgument) -> None:
    """The mount's active rules, operation counters and unsynced files (JSON)."""
    from rsdrill.faultfs.control import ControlError, request

    try:
        reply = request(mountpoint, {"op": "status"})
    except ControlError as exc:
        exit_invalid(str(exc))
    reply.pop("ok", None)
    typer.echo(json.dumps(reply, indent=2))
