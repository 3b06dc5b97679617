"""What every command module shares: the cursor, the versions claimed, the command sets the
dispatcher treats alike, namespace and statement helpers (the request is `request.py`, the
`@command` registry `dispatcher.py`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rsdrill.sandbox.config import ReplSetSpec
from rsdrill_emulator.errors import (
    CommandError,
)
from rsdrill_emulator.request import Request

MAX_BATCH_BYTES = 16 * 1024 * 1024
DEFAULT_BATCH = 101


@dataclass(frozen=True)
class ServerVersion:
    """The MongoDB release the emulator claims: 7.0, or the last one before hello (4.4.2)."""

    version: str
    array: tuple[int, int, int, int]
    max_wire: int


# buildInfo.gitVersion of every emulator process: how rsdrill tells its own servers apart.
GIT_VERSION = "rsdrill-sandbox"
CURRENT = ServerVersion("7.0.0", (7, 0, 0, 0), 21)
LEGACY = ServerVersion("4.4.1", (4, 4, 1, 0), 9)
OPLOG_NS = "local.oplog.rs"


@dataclass
class Cursor:
    ns: str
    docs: list[dict[str, Any]]
    position: int = 0


# What a connection may run before it logs in (a sandbox that requires logins).
_OPEN_COMMANDS = frozenset(
    {"hello", "ismaster", "saslstart", "saslcontinue", "authenticate", "ping", "buildinfo"}
    | {"endsessions", "connectionstatus"}
)

# Commands answered from memory (or that wait themselves when they must read the disk, as an
# oplog fetch beyond the in-memory tail): they need not wait for a commit on a slow disk.
_MEMORY_ONLY = frozenset(
    {"hello", "ismaster", "saslstart", "saslcontinue", "ping", "buildinfo", "serverstatus"}
    | {"endsessions", "killsessions", "refreshsessions", "killallsessions", "killcursors"}
    | {"replsetgetstatus", "replsetgetconfig", "replsetheartbeat", "configurefailpoint"}
    | {"rsdrillgetoplog", "rsdrillclockskew"}
)

# Counted by their own opcounter only, not as a command too (mongod's shouldAffectCommandCounter
# is false for them): a CRUD-heavy client must not look like twice its load in serverStatus.
# A secondary's oplog fetch is a getMore on mongod's oplog cursor, and is counted as one.
_OWN_COUNTER = frozenset(
    {"find", "getmore", "insert", "update", "delete", "bulkwrite", "rsdrillgetoplog"}
)

# Commands that take a write concern; as on mongod, they wait for it even when they fail.
_WRITE_CONCERN_COMMANDS = frozenset(
    {"insert", "update", "delete", "findandmodify", "create", "createindexes", "dropindexes"}
    | {"drop", "dropdatabase", "renamecollection", "collmod"}
)


def _ns(req: Request, key: str | None = None) -> str:
    coll = req.body.get(key or req.name)
    if not isinstance(coll, str) or not coll:
        raise CommandError(73, f"Invalid namespace specified for {req.name}")
    return f"{req.db}.{coll}"


def claimed(spec: ReplSetSpec) -> ServerVersion:
    return LEGACY if spec.handshake == "legacy" else CURRENT


def storage_engine(spec: ReplSetSpec) -> str:
    """The emulator's storage engine by its own name: never taken for WiredTiger."""
    return "rsdrill-memory" if spec.storage == "memory" else "rsdrill-sqlite"


def _admin_only(req: Request) -> None:
    if req.db != "admin":
        raise CommandError(13, f"{req.name} may only be run against the admin database")


_GENERIC_FIELDS = frozenset({"$db", "lsid", "$clusterTime", "$readPreference", "comment",
                             "txnNumber", "writeConcern", "maxTimeMS", "apiVersion", "apiStrict",
                             "apiDeprecationErrors"})  # fmt: skip


def _stmt_id(req: Request, index: int) -> int:
    ids = req.body.get("stmtIds")
    return int(ids[index]) if ids else index
