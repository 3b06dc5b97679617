"""`rsdrill lever engage|disengage|status`, and the fleet's gate for `run` and `replay`.

The fleet's store is RSDRILL_FLEET when set (`kubernetes://NAMESPACE` for runs inside a
cluster), else the history store when that is shared (`--history mongodb://…` or
RSDRILL_HISTORY), else a SQLite file of this user's ($RSDRILL_HOME/fleet.sqlite), so a lever
engaged on a machine stops every run on it whatever directory it started in."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from rsdrill.cli.errors import exit_invalid

if TYPE_CHECKING:
    from rsdrill.experiment.schema import Experiment
    from rsdrill.fleet.gate import FleetGate
    from rsdrill.fleet.store import FleetStore

HISTORY_ENV = "RSDRILL_HISTORY"
FLEET_ENV = "RSDRILL_FLEET"
T = TypeVar("T")
EXIT_ENGAGED = 5  # as a run the lever stopped (rsdrill.engine.stop_watch.EXIT_STOPPED)

app = typer.Typer(help="The fleet's stop lever: stop every run and keep new ones from starting.",
                  no_args_is_help=True)  # fmt: skip

StoreOption = Annotated[
    str | None,
    typer.Option("--store", envvar=[FLEET_ENV, HISTORY_ENV], metavar="PATH|URL",
                 help="The fleet's store whose lever this is: kubernetes://NAMESPACE, or the "
                 "shared history store (mongodb://…); without one, this user's "
                 "$RSDRILL_HOME/fleet.sqlite."),
]  # fmt: skip


def fleet_location(history: str | None) -> str:
    """Where the lever and leases are: RSDRILL_FLEET, a shared store named, else this user's
    file."""
    from rsdrill.fleet.store import MONGODB_SCHEMES

    if os.environ.get(FLEET_ENV):
        return os.environ[FLEET_ENV]
    if history and history.startswith(MONGODB_SCHEMES):
        return history
    home = Path(os.environ.get("RSDRILL_HOME", Path.home() / ".rsdrill"))
    return str(home / "fleet.sqlite")


def open_fleet(location: str) -> tuple[FleetStore, bytes | None]:
    """The store and the fleet key; a shared store without a key, or a key that cannot be
    read, exits 2."""
    from rsdrill.fleet.location import open_store
    from rsdrill.fleet.signing import KEY_ENV, FleetKeyError, fleet_key
    from rsdrill.fleet.store import SHARED_SCHEMES, FleetStoreError

    try:
        key = fleet_key()
        store = open_store(location)
    except (FleetKeyError, FleetStoreError) as exc:
        exit_invalid(f"fleet: {exc}")
    if key is None and location.startswith(SHARED_SCHEMES):
        exit_invalid(f"fleet: the shared store {store.where} needs the fleet key ({KEY_ENV}): "
                     "without it anyone who can write to the store could stop or release "
                     "runs")  # fmt: skip
    return store, key


def fleet_gate(experiment: Experiment, history: str | None, lease_wait_s: float) -> FleetGate:
    """The run's gate. Exit 2: the store unreachable, or it is the cluster under test; exit 5:
    the lever is engaged (nothing is started)."""
    from rsdrill.fleet import lever
    from rsdrill.fleet.gate import FleetGate
    from rsdrill.fleet.store import FleetStoreError

    store, key = open_fleet(fleet_location(history))
    shared = set(store.hosts) & set(_target_hosts(experiment))
    if shared:
        exit_invalid(f"fleet: the store {store.where} is on the cluster under test "
                     f"({', '.join(sorted(shared))}): keep the history elsewhere")  # fmt: skip
    try:
        now = lever.state(store, key)
    except FleetStoreError as exc:
        exit_invalid(f"fleet: cannot read the stop lever: {exc}")
    if now.engaged:
        typer.echo(f"{experiment.name}: not started: the fleet's stop lever is "
                   f"{now.describe()}", err=True)  # fmt: skip
        raise typer.Exit(EXIT_ENGAGED)
    return FleetGate(store, key, experiment.name, lease_wait_s=lease_wait_s)


def _target_hosts(experiment: Experiment) -> list[str]:
    """The seeds of the target's URI (none for a built sandbox, or one the check refuses)."""
    from rsdrill.connection import SettingsError, parse_uri

    if not experiment.target.uri:
        return []
    try:
        return parse_uri(experiment.target.uri).seeds
    except SettingsError:
        return []


def _on_lever(store: str | None, act: Callable[[FleetStore, bytes | None], T]) -> tuple[str, T]:
    """`act` on the lever of the store; the store as named, and what `act` returned. A store
    that cannot be read or written exits 2."""
    from rsdrill.fleet.store import FleetStoreError

    fleet, key = open_fleet(fleet_location(store))
    try:
        return fleet.where, act(fleet, key)
    except FleetStoreError as exc:
        exit_invalid(f"fleet: {exc}")


@app.command()
def engage(
    reason: Annotated[str, typer.Option("--reason", help="Why (shown to every run stopped).")],
    store: StoreOption = None,
) -> None:
    """Engage the lever: every run using the store stops (faults reverted, exit 5)."""
    from rsdrill.fleet import lever

    where, _ = _on_lever(store, lambda fleet, key: lever.engage(fleet, key, reason))
    typer.echo(f"lever engaged in {where}: {reason}")


@app.command()
def disengage(store: StoreOption = None) -> None:
    """Disengage the lever: runs may start again."""
    from rsdrill.fleet import lever

    where, _ = _on_lever(store, lever.disengage)
    typer.echo(f"lever disengaged in {where}")


@app.command()
def status(store: StoreOption = None) -> None:
    """Where the lever stands, who moved it and why (exit 5 while engaged)."""
    from rsdrill.fleet import lever

    where, now = _on_lever(store, lever.state)
    typer.echo(f"lever {now.describe()} ({where})")
    if now.engaged:
        raise typer.Exit(EXIT_ENGAGED)
