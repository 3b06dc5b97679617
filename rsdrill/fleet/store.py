"""Where the fleet's lever events and leases are kept: the SQLite file of the run history (one
machine), or a MongoDB the team already has (`mongodb://…`, shared by every machine that runs
experiments). Both hold plain JSON records; a lease is replaced only by whoever names the one
it replaces (compare and set), so two runs never both take it."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any, Protocol

from rsdrill.errors import RsdrillError
from rsdrill.redact import redact_uri

MONGODB_SCHEMES = ("mongodb://", "mongodb+srv://")
SQLITE_SCHEME = "sqlite:///"
KUBERNETES_SCHEME = "kubernetes://"
SHARED_SCHEMES = (*MONGODB_SCHEMES, KUBERNETES_SCHEME)
"""Stores other machines (or pods) share: each needs the fleet key."""
DEFAULT_DATABASE = "rsdrill"
STORE_TIMEOUT_MS = 5000
# Concurrent runs on one machine wait for each other's write this long.
_BUSY_TIMEOUT_S = 30.0


class FleetStoreError(RsdrillError):
    """The fleet's store cannot be reached, read or written."""


class FleetStore(Protocol):
    """Lever events (append only) and one lease per cluster."""

    @property
    def where(self) -> str:
        """The store as messages name it (no password)."""

    @property
    def hosts(self) -> tuple[str, ...]:
        """The servers the store lives on (none for a file)."""

    def lever_events(self, limit: int) -> list[dict[str, Any]]:
        """The newest `limit` events, newest first by their `at`: it is signed, where the
        order they were stored in is not (a genuine old event copied in again stays old)."""

    def add_lever_event(self, event: dict[str, Any]) -> None: ...

    def lease(self, cluster: str) -> dict[str, Any] | None: ...

    def put_lease(self, cluster: str, record: dict[str, Any],
                  replacing: dict[str, Any] | None) -> bool:  # fmt: skip
        """Store `record` as the cluster's lease if the lease stored now is `replacing` (its
        token), or there is none and `replacing` is None; whether it was stored."""

    def drop_lease(self, cluster: str, token: str) -> None:
        """Remove the cluster's lease if it still has `token`."""

    def close(self) -> None:
        """Let go of connections (nothing for a file)."""


_SCHEMA = """
CREATE TABLE IF NOT EXISTS lever_event (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    record TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS lease (
    cluster TEXT PRIMARY KEY,
    token TEXT NOT NULL,
    record TEXT NOT NULL
);
"""


class SqliteFleetStore:
    """In the run history's SQLite file, readable and writable by its owner only."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def where(self) -> str:
        return str(self.path)

    @property
    def hosts(self) -> tuple[str, ...]:
        return ()

    def _connect(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if not self.path.exists():
                os.close(os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600))
            conn = sqlite3.connect(self.path, timeout=_BUSY_TIMEOUT_S, isolation_level=None)
            conn.executescript(_SCHEMA)
        except (sqlite3.Error, OSError) as exc:
            raise FleetStoreError(f"{self.path}: {exc}") from None
        return conn

    def _run(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        try:
            with closing(self._connect()) as conn:
                return conn.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise FleetStoreError(f"{self.path}: {exc}") from None

    def lever_events(self, limit: int) -> list[dict[str, Any]]:
        rows = self._run("SELECT record FROM lever_event ORDER BY json_extract(record, '$.at') "
                         "DESC, seq DESC LIMIT ?", (limit,))  # fmt: skip
        return [json.loads(r[0]) for r in rows]

    def add_lever_event(self, event: dict[str, Any]) -> None:
        self._run("INSERT INTO lever_event (record) VALUES (?)", (json.dumps(event),))

    def lease(self, cluster: str) -> dict[str, Any] | None:
        rows = self._run("SELECT record FROM lease WHERE cluster = ?", (cluster,))
        return json.loads(rows[0][0]) if rows else None

    def put_lease(self, cluster: str, record: dict[str, Any],
                  replacing: dict[str, Any] | None) -> bool:  # fmt: skip
        body = json.dumps(record)
        try:
            with closing(self._connect()) as conn:
                if replacing is None:
                    done = conn.execute(
                        "INSERT OR IGNORE INTO lease (cluster, token, record) VALUES (?, ?, ?)",
                        (cluster, record["token"], body))  # fmt: skip
                else:
                    done = conn.execute(
                        "UPDATE lease SET token = ?, record = ? WHERE cluster = ? AND token = ?",
                        (record["token"], body, cluster, replacing.get("token")))  # fmt: skip
                return done.rowcount == 1
        except sqlite3.Error as exc:
            raise FleetStoreError(f"{self.path}: {exc}") from None

    def drop_lease(self, cluster: str, token: str) -> None:
        self._run("DELETE FROM lease WHERE cluster = ? AND token = ?", (cluster, token))

    def close(self) -> None:
        pass  # a connection per call


class MongoFleetStore:
    """In a MongoDB (its URI's database, else `rsdrill`): collections `lever_events` and
    `leases`. It must not be the cluster under test (the gate refuses that)."""

    def __init__(self, uri: str) -> None:
        from pymongo import MongoClient
        from pymongo.uri_parser import parse_uri

        self.uri = uri
        try:
            parsed = parse_uri(uri)
        except Exception as exc:
            raise FleetStoreError(f"{redact_uri(uri)}: {exc}") from None
        self._hosts = tuple(f"{h}:{p}" for h, p in parsed["nodelist"])
        self._client: Any = MongoClient(uri, serverSelectionTimeoutMS=STORE_TIMEOUT_MS,
                                        connectTimeoutMS=STORE_TIMEOUT_MS,
                                        socketTimeoutMS=STORE_TIMEOUT_MS,
                                        appname="rsdrill-fleet")  # fmt: skip
        self._db = self._client[parsed["database"] or DEFAULT_DATABASE]

    @property
    def where(self) -> str:
        return redact_uri(self.uri)

    @property
    def hosts(self) -> tuple[str, ...]:
        return self._hosts

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        from pymongo.errors import PyMongoError

        try:
            return fn(*args, **kwargs)
        except PyMongoError as exc:
            raise FleetStoreError(f"{self.where}: {what}: {redact_uri(str(exc))}") from None

    def lever_events(self, limit: int) -> list[dict[str, Any]]:
        found = self._call("lever_events", lambda: list(
            self._db.lever_events.find({}, {"_id": 0}).sort([("at", -1), ("_id", -1)])
            .limit(limit)))  # fmt: skip
        return found

    def add_lever_event(self, event: dict[str, Any]) -> None:
        self._call("add lever event", self._db.lever_events.insert_one, dict(event))

    # A lease is a series of generations, one document each ({_id: [cluster, gen] as JSON,
    # cluster, gen, token, record, released}): taking it inserts the next generation, so a race
    # is decided by the unique _id alone. An update cannot decide one: servers such as FerretDB
    # find the documents a filter matches and update them in a second step, so a compare and
    # set by update let three of six runs take an expired lease at once. Only the holder
    # updates its own generation (renewal, release); a newer one means it lost the lease.

    def _newest(self, cluster: str) -> dict[str, Any] | None:
        found = self._call("lease", lambda: list(
            self._db.leases.find({"cluster": cluster}).sort([("gen", -1)]).limit(1)))  # fmt: skip
        if not found:
            return None
        if not isinstance(found[0].get("gen"), int):
            raise FleetStoreError(f"{self.where}: the lease of {cluster} has generation "
                                  f"{found[0].get('gen')!r}: not written by rsdrill")  # fmt: skip
        return dict(found[0])

    def lease(self, cluster: str) -> dict[str, Any] | None:
        newest = self._newest(cluster)
        return None if newest is None or newest.get("released") else newest["record"]

    def put_lease(self, cluster: str, record: dict[str, Any],
                  replacing: dict[str, Any] | None) -> bool:  # fmt: skip
        from pymongo.errors import DuplicateKeyError, PyMongoError

        newest = self._newest(cluster)
        current = None if newest is None or newest.get("released") else newest
        if current is not None and replacing is not None and (
                current["token"] == replacing.get("token") == record["token"]):  # fmt: skip
            self._call("renew lease", self._db.leases.update_one,
                       {"_id": current["_id"]}, {"$set": {"record": record}})  # fmt: skip
            return True
        if (current is None) != (replacing is None) or (
                current is not None and replacing is not None
                and current["token"] != replacing.get("token")):  # fmt: skip
            return False  # not the lease the caller saw (or not its own any more)
        gen = newest["gen"] + 1 if newest is not None else 1
        doc = {"_id": json.dumps([cluster, gen]), "cluster": cluster, "gen": gen,
               "token": record["token"], "record": record}  # fmt: skip
        try:
            self._db.leases.insert_one(doc)
        except DuplicateKeyError:
            return False
        except PyMongoError as exc:
            raise FleetStoreError(f"{self.where}: take lease: {redact_uri(str(exc))}") from None
        # Older generations are nobody's now; a failure here leaves them for the next taker.
        with contextlib.suppress(FleetStoreError):
            self._call("forget old leases", self._db.leases.delete_many,
                       {"cluster": cluster, "gen": {"$lt": gen}})  # fmt: skip
        return True

    def drop_lease(self, cluster: str, token: str) -> None:
        self._call("release lease", self._db.leases.update_one,
                   {"cluster": cluster, "token": token}, {"$set": {"released": True}})  # fmt: skip

    def close(self) -> None:
        self._client.close()
