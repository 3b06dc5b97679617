"""Prepared transactions: the participant's side of a two-phase commit, as every member of a
shard holds them.

A transaction prepared on a shard's primary is written as its own oplog entry (`applyOps` with
`prepare: true`, as mongod's), majority-committed before the primary votes to commit; it
changes no data. From then on the transaction belongs to the replica set, not to a primary: it
survives a stepdown, a failover (the new primary has the entry), a restart (the table below is
kept with the data) and the transaction lifetime limit, and ends only by the coordinator's
decision: a `commitTransaction` entry (with the commit timestamp, the largest of the
participants' prepare timestamps; its data visible from that timestamp on) or an
`abortTransaction` entry. Until then, the documents it wrote are held: a snapshot read at or
after its prepare timestamp waits (mongod's prepare conflict), and a write to one waits or
conflicts.

Unlike mongod's, the emulator's commit entry carries the transaction's operations again, so a
member applies it without looking back in its oplog.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bson.int64 import Int64
from bson.timestamp import Timestamp

from rsdrill_emulator.datastore import id_key, session_key
from rsdrill_emulator.errors import CommandError
from rsdrill_emulator.oplog import is_prepare

if TYPE_CHECKING:
    from rsdrill_emulator.request import Request
    from rsdrill_emulator.storage import Database

_META_KEY = "prepared_transactions"
# The statement ids the session table records a prepare and an abort under (a commit is -1,
# `transactions.COMMIT_STATEMENT`; clients' own ids are >= 0).
PREPARE_STATEMENT = -2
ABORT_STATEMENT = -3


def session_fields(
    lsid: dict[str, Any], number: int, stmt: int, res: dict[str, Any]
) -> dict[str, Any]:
    """What an oplog entry of a transaction's end records in the session table."""
    return {"lsid": lsid, "txnNumber": Int64(number), "stmtId": stmt, "res": res}


async def wait_unprepared(table: PreparedTable, req: Request, at: Timestamp) -> None:
    """A read at `at` of a collection a transaction prepared at or before `at` holds waits for
    its commit or abort (mongod's prepare conflict: either outcome changes what it reads)."""
    coll = req.body.get(req.name)
    if not len(table) or not isinstance(coll, str):
        return
    ns = f"{req.db}.{coll}"
    max_ms = int(req.body.get("maxTimeMS") or 0)
    deadline = time.monotonic() + max_ms / 1000 if max_ms else None
    while table.blocks_read(ns, at):
        if deadline is not None and time.monotonic() > deadline:
            raise CommandError(50, "operation exceeded time limit (a prepared transaction "
                                   "holds what it reads)")  # fmt: skip
        await table.changed(1.0)


@dataclass
class Prepared:
    lsid: dict[str, Any]
    number: int
    prepare_ts: Timestamp
    ops: list[dict[str, Any]]
    # ns → id keys of the documents it wrote.
    held: dict[str, set[bytes]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for op in self.ops:
            if op.get("op") in ("i", "u", "d"):
                doc_id = (op["o2"] if op["op"] == "u" else op["o"])["_id"]
                self.held.setdefault(op["ns"], set()).add(id_key(doc_id))

    def document(self) -> dict[str, Any]:
        return {"lsid": self.lsid, "txnNumber": Int64(self.number),
                "prepareTimestamp": self.prepare_ts, "ops": self.ops}  # fmt: skip


class PreparedTable:
    """The member's prepared transactions, kept in step with its oplog (each entry applied,
    undone by a rollback) and with its data files (read back at startup)."""

    def __init__(self, database: Database) -> None:
        self._database = database
        self._by_session: dict[bytes, Prepared] = {}
        self._changed = asyncio.Event()
        for doc in database.get_meta(_META_KEY) or []:
            self._add(Prepared(doc["lsid"], int(doc["txnNumber"]), doc["prepareTimestamp"],
                               list(doc["ops"])))  # fmt: skip

    def __len__(self) -> int:
        return len(self._by_session)

    def of_session(self, lsid: dict[str, Any]) -> Prepared | None:
        """The session's prepared transaction, whatever its number."""
        return self._by_session.get(session_key(lsid))

    def find(self, lsid: dict[str, Any], number: int) -> Prepared | None:
        found = self.of_session(lsid)
        return found if found is not None and found.number == number else None

    def holds(self, ns: str, key: bytes) -> bool:
        return any(key in p.held.get(ns, ()) for p in self._by_session.values())

    def holding(self, ns: str) -> list[set[bytes]]:
        """The id keys each prepared transaction holds in `ns`."""
        return [p.held[ns] for p in self._by_session.values() if ns in p.held]

    def blocks_read(self, ns: str, at: Timestamp) -> bool:
        """A read of `ns` at `at` would meet a document a transaction prepared at or before
        `at` holds (mongod blocks on the document; here on its collection)."""
        return any(ns in p.held and p.prepare_ts <= at for p in self._by_session.values())

    def applied(self, entry: dict[str, Any]) -> None:
        """Follow one applied oplog entry (a prepare, or the end of a prepared transaction)."""
        if is_prepare(entry):
            self._add(Prepared(entry["lsid"], int(entry["txnNumber"]), entry["ts"],
                               list(entry["o"]["applyOps"])))  # fmt: skip
        elif entry.get("op") == "c" and "lsid" in entry and _ends_prepared(entry["o"]):
            self._by_session.pop(session_key(entry["lsid"]), None)
        else:
            return
        self._save()

    def undone(self, entry: dict[str, Any]) -> None:
        """A rollback removed this entry: a prepare is gone, an ended one is prepared again."""
        o = entry.get("o") or {}
        if is_prepare(entry):
            self._by_session.pop(session_key(entry["lsid"]), None)
        elif entry.get("op") == "c" and "lsid" in entry and "prepareTimestamp" in o:
            ops = o.get("applyOps") or o.get("preparedOps") or []
            self._add(Prepared(entry["lsid"], int(entry["txnNumber"]), o["prepareTimestamp"],
                               list(ops)))  # fmt: skip
        else:
            return
        self._save()

    async def changed(self, timeout: float) -> None:
        """Until a transaction is prepared or ends (or `timeout`): waiters check again."""
        event = self._changed
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout)

    def _add(self, prepared: Prepared) -> None:
        self._by_session[session_key(prepared.lsid)] = prepared

    def _save(self) -> None:
        self._database.set_meta(_META_KEY, [p.document() for p in self._by_session.values()])
        self._changed.set()
        self._changed = asyncio.Event()


def _ends_prepared(o: dict[str, Any]) -> bool:
    return "prepareTimestamp" in o and ("commitTransaction" in o or "abortTransaction" in o)
