"""A router (mongos) of the sandbox's sharded cluster: clients' commands in, each sent on to
the shards that hold what it touches, as the routing table cached from the config servers
says, and the shards' replies merged back.

What a client can tell apart from mongos is kept: hello answers `msg: "isdbgrid"`, a command
meets the shard primary the router knows (retried on the next primary for retryable writes
and reads, as mongos does), cursors are the router's own. What is not there yet is said where
a command meets it: a transaction may touch one shard only (no two-phase commit yet).

Every command on a collection carries the router's shard version for it; a shard that holds
another answers StaleConfig, and the router refreshes its table from the config servers and
sends it again where the new table says (`StaleRouting`), as mongos does.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bson.int64 import Int64
from bson.objectid import ObjectId
from bson.timestamp import Timestamp

from rsdrill.sandbox.config import CONFIG_SET, ClusterSpec, ReplSetSpec
from rsdrill_emulator import transactions
from rsdrill_emulator.commands.dispatcher import label_retryable_write_concern_error
from rsdrill_emulator.commands.shardversion import STALE_CONFIG
from rsdrill_emulator.errors import CommandError
from rsdrill_emulator.failpoint import FailPoint
from rsdrill_emulator.remote_set import ReplicaSet
from rsdrill_emulator.request import Request
from rsdrill_emulator.router.catalog import Catalog
from rsdrill_emulator.router.transaction import RoutedTransaction
from rsdrill_emulator.transactions import COMMIT_OR_ABORT

Handler = Callable[["Router", Request], Awaitable[dict[str, Any]]]
HANDLERS: dict[str, Handler] = {}
_FORWARD_DROPPED = frozenset({"$db", "$clusterTime", "$readPreference"})
_TRANSACTIONS_KEPT = 10_000
STALE_RETRIES = 10
"""How often a command is routed again after StaleConfig (mongos's kMaxNumStaleVersionRetries)."""
SNAPSHOT_TOO_OLD = 239


class StaleRouting(Exception):
    """A shard answered StaleConfig: the command did nothing there; route it again."""

    def __init__(self, reply: dict[str, Any]) -> None:
        super().__init__(reply.get("errmsg"))
        self.reply = reply


def command(*names: str) -> Callable[[Handler], Handler]:
    """Register a router handler for these command names."""

    def register(fn: Handler) -> Handler:
        for name in names:
            HANDLERS[name.lower()] = fn
        return fn

    return register


@dataclass
class RemoteCursor:
    """A cursor one shard member holds, handed to the client under the router's own id."""

    shard: str
    host: str
    cursor_id: int
    db: str
    collection: str
    stream: bool = False  # a change stream's: its errors may be resumable


@dataclass
class MergedCursor:
    """Documents merged from several shards, served by the router batch by batch."""

    ns: str
    docs: list[dict[str, Any]]
    position: int = 0


@dataclass
class MergedStream:
    """A change stream over every shard's (router/streams.py): each shard's cursor and the
    last postBatchResumeToken it gave."""

    ns: str
    db: str
    collection: str
    cursors: dict[str, tuple[str, int]]  # shard → (member, its cursor id)
    marks: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The newest token the client was given (or resumed from): no batch's is older.
    last: dict[str, Any] = field(default_factory=dict)


@dataclass
class Router:
    """One router process's state: the sets it reaches, its routing table, its cursors and the
    shard each open transaction runs on."""

    host: str
    config: ReplicaSet
    shards: dict[str, ReplicaSet]
    catalog: Catalog
    process_id: ObjectId = field(default_factory=ObjectId)
    cluster_time: dict[str, Any] | None = None
    cursors: dict[int, RemoteCursor | MergedCursor | MergedStream] = field(default_factory=dict)
    transactions: dict[tuple[bytes, int], RoutedTransaction] = field(default_factory=dict)
    connections: int = 0
    certificate_subjects: dict[int, str] = field(default_factory=dict)
    fail_points: dict[str, FailPoint] = field(default_factory=dict)
    # A migration record unpinged this long is taken over: twice the config servers'
    # election timeout and 5 s (so an election of theirs, which stops every ping, is no
    # router's death), at least 10 s.
    abandoned_after_s: float = 10.0
    # Migration steps held (moveChunkHangAtStepN on), and how often each was reached.
    hang_points: set[str] = field(default_factory=set)
    hang_entries: dict[str, int] = field(default_factory=dict)
    app_names: dict[int, str] = field(default_factory=dict)

    @classmethod
    def open(cls, directory: Path, host: str) -> Router:
        cluster = ClusterSpec.read(directory)

        def replica_set(name: str) -> ReplicaSet:
            spec: ReplSetSpec = cluster.set_spec(directory, name)
            return ReplicaSet(name, [m.host for m in spec.members])

        config = replica_set(CONFIG_SET)
        shards = {name: replica_set(name) for name in cluster.shards}
        election_s = cluster.set_spec(directory, CONFIG_SET).settings.election_timeout_ms / 1000
        return cls(host, config, shards, Catalog(config),
                   abandoned_after_s=max(10.0, 2 * election_s + 5))  # fmt: skip

    def snapshot_pinned(self, body: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        """A snapshot read outside a transaction, with the atClusterTime every shard reads at
        (the client's, else the newest cluster time the router has seen, as mongos picks one
        for a read on several shards), and that time; other commands as they are, None."""
        concern = body.get("readConcern") or {}
        if concern.get("level") != "snapshot" or "autocommit" in body:
            return body, None
        at = concern.get("atClusterTime") or (self.cluster_time or {}).get("clusterTime")
        if at is None:
            return body, None
        return {**body, "readConcern": {**concern, "atClusterTime": at}}, at

    @property
    def config_connection_string(self) -> str:
        """The config servers as mongos's --configdb names them: "<set>/<host>,<host>"."""
        return f"{self.config.name}/{','.join(self.config.hosts)}"

    async def hang_at(self, name: str) -> None:
        """Hold here while fail point `name` is on (MongoDB's moveChunkHangAtStepN)."""
        self.hang_entries[name] = self.hang_entries.get(name, 0) + 1
        while name in self.hang_points:
            await asyncio.sleep(0.01)

    def forget(self, connection_id: int) -> None:
        self.certificate_subjects.pop(connection_id, None)
        self.app_names.pop(connection_id, None)

    async def run(self, req: Request) -> dict[str, Any]:
        self.gossip(req.body)  # the client's cluster time, seen through another router
        handler = HANDLERS.get(req.name.lower())
        retryable = _retryable_write(req.body)
        fail = self._fail_point(req)
        if fail and not fail.after_execution and (early := await fail.disrupt(retryable)):
            if fail.error_labels is None:  # the labels mongos would give the error itself
                transactions.label_error(req, early)
            return self._stamped(early)
        try:
            if handler is None:
                raise CommandError(59, f"no such command: '{req.name}'")
            reply = await self._routed(handler, req)
        except CommandError as exc:
            # A commit or abort that met a retryable error (its shard's primary gone) is
            # labelled as mongos labels it: the driver retries it once.
            ends = req.name.lower() in ("committransaction", "aborttransaction")
            reply = exc.document(retryable_write=retryable or ends)
        reply.setdefault("ok", 1.0)
        transactions.label_error(req, reply)
        if fail and fail.after_execution and (late := await fail.disrupt(retryable)):
            return self._stamped(late)
        if fail and fail.write_concern_error:
            reply["writeConcernError"] = dict(fail.write_concern_error)
            label_retryable_write_concern_error(req, reply)
        return self._stamped(reply)

    def _fail_point(self, req: Request) -> FailPoint | None:
        """The router's own failCommand, if it fires for this command (mongos has one too:
        the specification tests set it on each router)."""
        if (app := req.handshake_application()) is not None:
            self.app_names[req.connection_id] = app
        app_name = self.app_names.get(req.connection_id)
        return next((f for f in self.fail_points.values() if not f.at_cursor_checkout
                     and f.fires_for(req.name, req.body, app_name)), None)  # fmt: skip

    def _stamped(self, reply: dict[str, Any]) -> dict[str, Any]:
        """The newest cluster time the router has seen, on every reply; a reply the router
        made itself (merged, or its own command's) gets it as its operationTime too."""
        if self.cluster_time is not None:
            reply["$clusterTime"] = self.cluster_time
            reply.setdefault("operationTime", self.cluster_time["clusterTime"])
        return reply

    async def _routed(self, handler: Handler, req: Request) -> dict[str, Any]:
        """The handler's reply, run again on a fresh routing table each time a shard found
        the router's stale (a write handler retries its own remaining statements, so what
        reaches here did nothing yet)."""
        for attempt in range(STALE_RETRIES):
            try:
                return await handler(self, req)
            except StaleRouting:
                await self.refreshed(attempt)
        return await handler(self, req)

    async def refreshed(self, attempt: int) -> None:
        """After StaleConfig: the table reloaded, after a pause growing with each attempt
        (the shard may not have its own record of a change the config servers have yet)."""
        await asyncio.sleep(0.01 * attempt)
        await self.catalog.refresh()

    # -- sending on --------------------------------------------------------------------------

    def shard(self, name: str) -> ReplicaSet:
        """A shard's set by its name (the config servers' by theirs: they hold `config`)."""
        found = self.config if name == CONFIG_SET else self.shards.get(name)
        if found is None:
            raise CommandError(70, f"shard {name} is not one of {', '.join(self.shards)}")
        return found

    async def send(
        self,
        shard: str,
        db: str,
        body: dict[str, Any],
        *,
        read: bool = False,
        version: dict[str, Any] | None = None,
        idempotent: bool = False,
    ) -> tuple[str, dict[str, Any]]:
        """Run a client's command (its session and transaction fields kept) on a shard's
        primary; returns the member that answered and its reply. With `version` (the shard
        version of the table the command was routed by), StaleConfig raises StaleRouting."""
        key = transaction_key(body)
        txn = None if key is None else self.transaction(key, body)
        statement = txn is not None and next(iter(body)).lower() not in COMMIT_OR_ABORT
        asked = body
        if txn is not None and statement:
            body = txn.statement_for(shard, body)
        # As mongos: reads, retryable writes and a transaction's end (idempotent on the
        # shard) are sent again to the next primary found after a NotPrimary or lost reply, as
        # are the router's own `idempotent` writes (mongos's kIdempotent retry policy).
        retry = (
            idempotent
            or (key is None and (read or _retryable_write(body)))
            or (txn is not None and not statement)
        )
        sent = {k: v for k, v in body.items() if k not in _FORWARD_DROPPED}
        if self.cluster_time is not None:  # gossiped, as mongos: causally later writes on
            sent["$clusterTime"] = self.cluster_time  # any shard get later timestamps
        if version is not None:
            sent["shardVersion"] = version
        host, reply = await self.shard(shard).on_primary(db, sent, retry=retry)
        self.gossip(reply)
        if (
            txn is not None
            and statement
            and reply.get("code") == SNAPSHOT_TOO_OLD
            and txn.may_start_again(shard)
            and self.cluster_time is not None
        ):  # the shard's history begins after the time chosen (it restarted, or rolled back)
            txn.start_again(self.cluster_time["clusterTime"])
            return await self.send(shard, db, asked, read=read, version=version)
        if txn is not None:
            # As mongos: the driver keeps it and sends it with a commit retried elsewhere.
            reply["recoveryToken"] = {"recoveryShardId": txn.coordinator or shard}
            if statement and (not reply.get("ok") or reply.get("writeErrors")):
                self.abort_elsewhere(body, txn, shard)
        if reply.get("code") == STALE_CONFIG and not reply.get("ok"):
            raise StaleRouting(reply)
        return host, reply

    def transaction(self, key: tuple[bytes, int], body: dict[str, Any]) -> RoutedTransaction:
        txn = self.transactions.get(key)
        if txn is None:
            at = self.cluster_time["clusterTime"] if self.cluster_time else None
            txn = self.transactions[key] = RoutedTransaction.begun(body, at)
            if len(self.transactions) > _TRANSACTIONS_KEPT:
                self.transactions.pop(next(iter(self.transactions)))
        return txn

    def abort_elsewhere(self, body: dict[str, Any], txn: RoutedTransaction, failed: str) -> None:
        """A statement failed on one participant, which aborted its part: as mongos, abort
        the others' now rather than leave their documents held until the client aborts."""
        abort = {"abortTransaction": 1, **{k: body[k] for k in ("lsid", "txnNumber")},
                 "autocommit": False}  # fmt: skip
        for shard in txn.participants:
            if shard != failed:
                task = asyncio.get_running_loop().create_task(
                    self.shard(shard).on_primary("admin", abort, retry=False)
                )
                task.add_done_callback(_ignore_outcome)

    def gossip(self, reply: dict[str, Any]) -> None:
        """Keep the newest cluster time a shard, config server or client has shown."""
        seen = reply.get("$clusterTime")
        if not isinstance(seen, dict) or not isinstance(seen.get("clusterTime"), Timestamp):
            return
        if self.cluster_time is None or seen["clusterTime"] > self.cluster_time["clusterTime"]:
            self.cluster_time = seen

    # -- cursors -----------------------------------------------------------------------------

    def new_cursor_id(self) -> int:
        while True:
            cursor_id = random.randint(1, 2**62)
            if cursor_id not in self.cursors:
                return cursor_id

    def remote_cursor(
        self, shard: str, host: str, db: str, reply: dict[str, Any], *, stream: bool = False
    ) -> None:
        """Hand the client a shard's open cursor under an id of the router's own."""
        cursor = reply.get("cursor")
        if not reply.get("ok") or not isinstance(cursor, dict) or not cursor.get("id"):
            return
        collection = str(cursor.get("ns", "")).partition(".")[2]
        own = self.new_cursor_id()
        self.cursors[own] = RemoteCursor(shard, host, int(cursor["id"]), db, collection, stream)
        cursor["id"] = Int64(own)

    def merged_cursor(
        self, ns: str, docs: list[dict[str, Any]], batch_size: int | None
    ) -> dict[str, Any]:
        """Serve merged documents as a cursor reply (`firstBatch`; 101 by default, none with
        batchSize 0), keeping the rest."""
        size = 101 if batch_size is None else batch_size
        batch, rest = docs[:size], docs[size:]
        cursor_id = 0
        if rest:
            cursor_id = self.new_cursor_id()
            self.cursors[cursor_id] = MergedCursor(ns, rest)
        return {"cursor": {"id": Int64(cursor_id), "ns": ns, "firstBatch": batch}, "ok": 1.0}


def transaction_key(body: dict[str, Any]) -> tuple[bytes, int] | None:
    """(session id, txnNumber) of a command inside a multi-document transaction."""
    if body.get("autocommit") is not False or "lsid" not in body:
        return None
    return bytes(body["lsid"]["id"]), int(body.get("txnNumber", 0))


def _ignore_outcome(task: asyncio.Task[Any]) -> None:
    """Best effort: a participant that cannot be reached aborts its part at its own lifetime
    limit or stepdown."""
    if not task.cancelled():
        task.exception()


def _retryable_write(body: dict[str, Any]) -> bool:
    return "txnNumber" in body and "autocommit" not in body
