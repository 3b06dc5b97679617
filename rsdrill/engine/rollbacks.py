"""What the members' rollbacks left: each member's rollback id, and where this machine can read
a member's data directory, the files of the documents each rollback took.

mongod keeps its rollback id on disk and adds one per rollback; `serverStatus` shows it as
`repl.rbid` (the clusterMonitor role may read it). Up to 4.2 a rollback file's folder is named
after the collection's namespace, from 4.4 after its UUID (`listCollections` gives the UUIDs).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import bson
from bson.binary import UUID_SUBTYPE, Binary
from bson.errors import BSONError

from rsdrill.analysis.rollbacks import RollbackFile, Writer, write_concern_words
from rsdrill.connection import ConnectOptions, DirectConnection, WireClientError
from rsdrill.platforms.base import ReadableData, RunTarget

if TYPE_CHECKING:
    from rsdrill.probes.availability import WriteLoop

TIMEOUT_S = 5.0
_ANY_MEMBER = {"$readPreference": {"mode": "secondaryPreferred"}}
# serverStatus with its replication section and without the bulky ones a real mongod adds.
_SERVER_STATUS = {"serverStatus": 1, "repl": 1, "metrics": 0, "locks": 0, "wiredTiger": 0,
                  "tcmalloc": 0, "opLatencies": 0}  # fmt: skip


@dataclass(frozen=True)
class RollbackWatch:
    """What a run knew of the members at its start, to account the rollbacks since."""

    since_wall: float
    ids: dict[str, int | None]
    # Each member's data directory, where this machine can read it (None: it cannot).
    directories: dict[str, Path | None]


def watch_rollbacks(target: RunTarget) -> RollbackWatch:
    """The members' rollback ids and readable data directories, before the first fault."""
    readable = target if isinstance(target, ReadableData) else None
    return RollbackWatch(
        since_wall=time.time(),
        ids=rollback_ids(target.members, target.connect_options),
        directories={m: readable.data_directory(m) if readable else None for m in target.members},
    )


def writers_of(loops: Iterable[WriteLoop]) -> list[Writer]:
    """The write probes as rollback accounting matches their writes."""
    return [Writer(loop.name, loop.collection.full_name,
                   write_concern_words(loop.collection.write_concern.document))
            for loop in loops]  # fmt: skip


def rollback_ids(members: Iterable[str], options: ConnectOptions) -> dict[str, int | None]:
    """Each member's rollback id; None for one that did not answer or does not say."""
    return {host: _rollback_id(host, options) for host in members}


def _rollback_id(host: str, options: ConnectOptions) -> int | None:
    conn = DirectConnection(host, TIMEOUT_S, options)
    try:
        reply = conn.command("admin", _SERVER_STATUS)
    except WireClientError:
        return None
    finally:
        conn.close()
    rbid = reply.get("repl", {}).get("rbid") if reply.get("ok") else None
    return int(rbid) if isinstance(rbid, int) else None


def collection_uuids(
    host: str, options: ConnectOptions, databases: Iterable[str]
) -> dict[str, str]:
    """UUID (as mongod names a rollback folder) → namespace, of the collections `host` lists
    in `databases`; empty where it gives none (mongod before 4.4 names folders by namespace)."""
    conn = DirectConnection(host, TIMEOUT_S, options)
    names: dict[str, str] = {}
    try:
        for db in databases:
            reply = conn.command(db, {"listCollections": 1, **_ANY_MEMBER})
            for info in reply.get("cursor", {}).get("firstBatch", []):
                found = info.get("info", {}).get("uuid")
                if isinstance(found, Binary) and found.subtype == UUID_SUBTYPE:
                    found = found.as_uuid()
                if isinstance(found, uuid.UUID):
                    names[str(found)] = f"{db}.{info['name']}"
    except WireClientError:
        pass  # the folders then keep their UUID names
    finally:
        conn.close()
    return names


def rollback_files(
    directory: Path, since_wall: float, uuid_names: Mapping[str, str]
) -> list[RollbackFile] | None:
    """The rollback files written under `directory` since `since_wall` (epoch seconds), each
    with the `_id`s of the documents it holds; None when they cannot be read."""
    found = []
    try:
        for path in sorted((directory / "rollback").glob("*/removed.*.bson")):
            if path.stat().st_mtime < since_wall:
                continue  # an earlier rollback's, on a data directory that outlives runs
            docs = bson.decode_all(path.read_bytes())
            namespace = uuid_names.get(path.parent.name, path.parent.name)
            found.append(RollbackFile(namespace, str(path), tuple(d.get("_id") for d in docs)))
    except (OSError, BSONError):
        return None
    return found
