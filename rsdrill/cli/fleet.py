"""`rsdrill lever engage|disengage|status`, and the fleet's gate for `run`, `replay` and
`soak`. Where the fleet's store is: `rsdrill.fleet.location`."""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from rsdrill.cli.errors import exit_invalid

if TYPE_CHECKING:
    from rsdrill.engine.options import RunGate
    from rsdrill.experiment.schema import Experiment
    from rsdrill.fleet.gate import FleetGate
    from rsdrill.fleet.store import FleetStore

# As rsdrill.fleet.location names them (not imported at start-up: `rsdrill --help` is fast).
HISTORY_ENV = "RSDRILL_HISTORY"
FLEET_ENV = "RSDRILL_FLEET"
T = TypeVar("T")
EXIT_ENGAGED = 5  # as a run the lever stopped (rsdrill.engine.stop_watch.EXIT_STOPPED)
EXIT_HELD = 3  # as a run refused by a guard (aborted)

app = typer.Typer(help="The fleet's stop lever: stop every run and keep new ones from starting.",
                  no_args_is_help=True)  # fmt: skip

StoreOption = Annotated[
    str | None,
    typer.Option("--store", envvar=[FLEET_ENV, HISTORY_ENV], metavar="PATH|URL",
                 help="The fleet's store whose lever this is: kubernetes://NAMESPACE, or the "
                 "shared history store (mongodb://…); without one, this user's "
                 "$RSDRILL_HOME/fleet.sqlite."),
]  # fmt: skip


def open_fleet(location: str) -> "tuple[FleetStore, bytes | None]":
    """The store and the fleet key; exit 2 when either cannot be had."""
    from rsdrill.fleet import location as fleet
    from rsdrill.fleet.signing import FleetKeyError
    from rsdrill.fleet.store import FleetStoreError

    try:
        return fleet.open_fleet(location)
    except (FleetKeyError, FleetStoreError) as exc:
        exit_invalid(f"fleet: {exc}")


def fleet_gate(experiment: "Experiment", history: str | None, lease_wait_s: float) -> "FleetGate":
    """The run's gate. Exit 2: the store or key cannot be had, or the store is on the cluster
    under test; exit 5: the lever is engaged (nothing is started)."""
    from rsdrill.fleet import lever
    from rsdrill.fleet.gate import StoreIsTarget, open_gate
    from rsdrill.fleet.signing import FleetKeyError
    from rsdrill.fleet.store import FleetStoreError

    try:
        gate = open_gate(experiment, history, lease_wait_s)
        now = lever.state(gate.store, gate.key)
    except (FleetKeyError, FleetStoreError, StoreIsTarget) as exc:
        exit_invalid(f"fleet: {exc}")
    if now.engaged:
        typer.echo(f"{experiment.name}: not started: the fleet's stop lever is "
                   f"{now.describe()}", err=True)  # fmt: skip
        raise typer.Exit(EXIT_ENGAGED)
    return gate


@contextmanager
def holding(gate: "RunGate | None") -> Iterator[None]:
    """The run's cluster held from here (before `rsdrill run`'s check reaches it) to the end;
    another run holding it past --lease-wait: its holder on stderr, exit 3, nothing done."""
    from rsdrill.errors import GuardRefusal

    if gate is None:
        yield
        return
    try:
        gate.hold()
    except GuardRefusal as exc:
        typer.echo(f"not started: {exc}", err=True)
        raise typer.Exit(EXIT_HELD) from None
    try:
        yield
    finally:
        gate.release()


def _on_lever(store: str | None, act: "Callable[[FleetStore, bytes | None], T]") -> tuple[str, T]:
    """`act` on the lever of the store; the store as named, and what `act` returned. A store
    that cannot be read or written exits 2."""
    from rsdrill.fleet.location import fleet_location
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
