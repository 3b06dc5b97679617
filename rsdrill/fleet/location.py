"""Where the fleet's lever and leases are, and the store a location names.

RSDRILL_FLEET when set (`kubernetes://NAMESPACE` for runs inside a cluster), else the history
store when that is shared (`mongodb://…`), else a SQLite file of this user's
($RSDRILL_HOME/fleet.sqlite), so a lever engaged on a machine stops every run on it whatever
directory it started in."""

from __future__ import annotations

import os
from pathlib import Path

from rsdrill.fleet.signing import KEY_ENV, FleetKeyError, fleet_key
from rsdrill.fleet.store import (
    KUBERNETES_SCHEME,
    MONGODB_SCHEMES,
    SHARED_SCHEMES,
    SQLITE_SCHEME,
    FleetStore,
    MongoFleetStore,
    SqliteFleetStore,
)
from rsdrill.home import rsdrill_home
from rsdrill.redact import redact_uri

FLEET_ENV = "RSDRILL_FLEET"
HISTORY_ENV = "RSDRILL_HISTORY"


def fleet_location(history: str | None) -> str:
    """Where the lever and leases are for a run whose history is `history`."""
    if os.environ.get(FLEET_ENV):
        return os.environ[FLEET_ENV]
    if history and history.startswith(MONGODB_SCHEMES):
        return history
    return str(rsdrill_home() / "fleet.sqlite")


def open_fleet(location: str) -> tuple[FleetStore, bytes | None]:
    """The store and the fleet key. FleetStoreError: the store cannot be opened;
    FleetKeyError: the key cannot be read, or a shared store has none (without it anyone who
    can write to the store could stop or release runs)."""
    key = fleet_key()
    if key is None and location.startswith(SHARED_SCHEMES):
        raise FleetKeyError(f"the shared store {redact_uri(location)} needs the fleet key "
                            f"({KEY_ENV}): without it anyone who can write to the store could "
                            "stop or release runs")  # fmt: skip
    return open_store(location), key


def open_store(location: str | Path) -> FleetStore:
    """The store at a `mongodb://` URI, a `kubernetes://NAMESPACE`, a `sqlite:///path` URL or
    a plain file path."""
    text = str(location)
    if text.startswith(MONGODB_SCHEMES):
        return MongoFleetStore(text)
    if text.startswith(KUBERNETES_SCHEME):
        from rsdrill.fleet.kubernetes import KubeFleetStore

        return KubeFleetStore(text)
    # sqlite:///relative/path, sqlite:////absolute/path (as SQLAlchemy spells them)
    return SqliteFleetStore(Path(text.removeprefix(SQLITE_SCHEME)))
