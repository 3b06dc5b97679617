"""Which store a location names: `mongodb://…`, `kubernetes://NAMESPACE`, `sqlite:///path` or
a plain file path."""

from __future__ import annotations

from pathlib import Path

from rsdrill.fleet.store import (
    KUBERNETES_SCHEME,
    MONGODB_SCHEMES,
    SQLITE_SCHEME,
    FleetStore,
    MongoFleetStore,
    SqliteFleetStore,
)


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
