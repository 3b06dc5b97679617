"""The dispatcher of one member's commands: logins and privileges, sessions and retryable
writes, cursors, the write concern a write waits for, and the reply's cluster time."""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bson.binary import Binary
from bson.int64 import Int64
from bson.timestamp import Timestamp

from rsdrill.privileges import granted, role_privileges
from rsdrill.sandbox.config import IGNORE_AFTER_CLUSTER_TIME_ENV
from rsdrill.scram import ScramServer
from rsdrill_emulator import (
    aws_login,
    changestream,
    pipeline,
    query,
    roles,
    transactions,
    writeconcern,
)
from rsdrill_emulator.commands import shardversion
from rsdrill_emulator.commands.base import (
    _MEMORY_ONLY,
    _OPEN_COMMANDS,
    _OWN_COUNTER,
    _WRITE_CONCERN_COMMANDS,
    DEFAULT_BATCH,
    MAX_BATCH_BYTES,
    Cursor,
    Request,
    _ns,
    _stmt_id,
)
from rsdrill_emulator.commands.documents import OWNED
from rsdrill_emulator.coordinator import Coordinators
from rsdrill_emulator.errors import (
    RETRYABLE_WRITE_CODES,
    CommandError,
    attach_topology_version,
)
from rsdrill_emulator.failpoint import (
    FailPoint,
)
from rsdrill_emulator.node import MemberState, Node
from rsdrill_emulator.oplog import OpTime
from rsdrill_emulator.storage import StorageReadError

Handler = Callable[["Commands", Request], Awaitable[dict[str, Any]]]
_HANDLERS: dict[str, Handler] = {}


def command(*names: str) -> Callable[[Handler], Handler]:
    """Register a handler for these command names (each family module's handlers do, when
    `rsdrill_emulator.commands` imports it)."""

    def register(fn: Handler) -> Handler:
        for name in names:
            _HANDLERS[name.lower()] = fn
        return fn

    return register


class Commands:
    """Dispatches commands for one member; owns its cursors and counters."""

    def __init__(self, node: Node) -> None:
        self.node = node
        # Planted (test-only): reads do not wait for their causal session's afterClusterTime.
        self.ignore_after_cluster_time = os.environ.get(IGNORE_AFTER_CLUSTER_TIME_ENV) == "1"
        self.cursors: dict[int, Cursor | changestream.ChangeStreamCursor] = {}
        self.opcounters = dict.fromkeys(
            ("insert", "query", "update", "delete", "getmore", "command"), 0
        )
        self.connections = 0
        self.fail_points: dict[str, FailPoint] = {}
        # Connections that logged in, and logins under way (when the sandbox requires them).
        # Per logged-in connection: its user and the database that user is defined on.
        self.logged_in: dict[int, tuple[str, str]] = {}
        self.logins: dict[int, ScramServer | aws_login.AwsConversation] = {}
        self.certificate_subjects: dict[int, str] = {}
        # The application each connection's handshake named (failCommand's appName filter).
        self.app_names: dict[int, str] = {}
        self.transactions = transactions.Transactions()
        self.coordinators = Coordinators(node)  # two-phase commits handed to this shard
        # The requests being answered now, by operation id: what `$currentOp` shows.
        self.in_progress: dict[int, Request] = {}
        self._op_ids = itertools.count(1)

    def forget(self, connection_id: int) -> None:
        """The connection closed: its login ends with it."""
        self.logged_in.pop(connection_id, None)
        self.logins.pop(connection_id, None)
        self.certificate_subjects.pop(connection_id, None)
        self.app_names.pop(connection_id, None)

    async def run(self, req: Request) -> dict[str, Any]:
        """The reply document for a request; errors become `{ok: 0, ...}`. A replica-set
        member's replies carry the cluster time, as mongod's do (`operationTime`, and
        `$clusterTime` with a zero signature, as a set without keys signs it)."""
        op_id = next(self._op_ids)
        self.in_progress[op_id] = req
        gossiped = req.body.get("$clusterTime")
        if isinstance(gossiped, dict) and isinstance(gossiped.get("clusterTime"), Timestamp):
            # As mongod's logical clock: a time seen elsewhere in the cluster (another shard's,
            # through a router or a client) orders this member's next write after it.
            self.node.clock.observe(gossiped["clusterTime"])
        owned = OWNED.set(None)
        try:
            reply = await self._run(req)
        finally:
            OWNED.reset(owned)
            del self.in_progress[op_id]
        node = self.node
        attach_topology_version(reply, node.topology_version())
        if not node.spec.standalone and not node.is_arbiter:
            op_time = reply.get("opTime")
            ts = op_time["ts"] if isinstance(op_time, dict) else node.last_applied.timestamp
            reply.setdefault("operationTime", ts)
            reply["$clusterTime"] = {
                "clusterTime": max(ts, node.last_applied.timestamp),
                "signature": {"hash": Binary(bytes(20)), "keyId": Int64(0)},
            }
        return reply

    async def _run(self, req: Request) -> dict[str, Any]:
        handler = _HANDLERS.get(req.name.lower())
        if handler is None or (req.name == "hello" and self.node.spec.handshake == "legacy"):
            return CommandError(59, f"no such command: '{req.name}'").document()
        if self.node.spec.standalone and (refusal := _standalone_refusal(req)) is not None:
            return refusal.document()
        if not req.db:
            return CommandError(40571, "OP_MSG requests require a $db argument").document()
        if (
            self.node.requires_login
            and req.connection_id not in self.logged_in
            and req.name.lower() not in _OPEN_COMMANDS
        ):
            return CommandError(13, f"command {req.name} requires authentication").document()
        if self.node.requires_login and (refusal := self._unauthorized(req)) is not None:
            return refusal.document()
        if shardversion.versioned(req):
            cached = await self._shard_record(req)
            stale = shardversion.stale_config(req, cached, self.node.spec.set_name)
            if stale is not None:
                return stale.document()
            belongs = shardversion.owned(cached)
            if belongs is not None:
                OWNED.set((_ns(req), belongs))
        if req.name.lower() not in _OWN_COUNTER:
            self.opcounters["command"] += 1
        if req.name.lower() not in _MEMORY_ONLY:
            await self.node.storage_idle()
        app = self._application_of(req)
        # Counted once, and only when a fail point counts statements (it reads the store).
        per_statement = any(f.retryable_writes_only for f in self.fail_points.values())
        statements = self._new_statements(req) if per_statement else 1
        fail = next(
            (f for f in self.fail_points.values()
             if not f.at_cursor_checkout and f.fires_for(req.name, req.body, app, statements)),
            None,
        )  # fmt: skip
        retryable = transactions.retryable_write(req)
        if (
            fail
            and not fail.after_execution
            and (early := await fail.disrupt(retryable)) is not None
        ):
            if fail.error_labels is None:
                transactions.label_error(req, early)
            return early
        cursor_id = req.body.get("getMore") if req.name.lower() == "getmore" else None
        stream = isinstance(cursor_id, int) and isinstance(
            self.cursors.get(cursor_id), changestream.ChangeStreamCursor
        )
        reply = await self._execute(handler, req)
        if reply.get("ok") == 0 and _takes_write_concern(req):
            await self._wait_after_failure(req, reply)
        if stream and reply.get("ok") == 0:
            # The stream's own error, raised once its cursor was found: a failCommand error
            # (returned above) comes before that and is labeled only as its data says.
            changestream.label_resumable(reply)
        if fail and fail.after_execution and (late := await fail.disrupt(retryable)) is not None:
            return late
        if fail and fail.write_concern_error:
            reply["writeConcernError"] = dict(fail.write_concern_error)
            label_retryable_write_concern_error(req, reply)
        return reply

    async def _shard_record(self, req: Request) -> dict[str, Any] | None:
        """The shard's record of the request's collection, once no migration of it is in its
        critical section (or after waiting CRITICAL_SECTION_WAIT_S for that)."""
        ns = _ns(req)
        deadline = time.monotonic() + shardversion.CRITICAL_SECTION_WAIT_S
        while True:
            cached = self.node.store.get(shardversion.CACHE_NS, ns)
            if not shardversion.in_critical_section(cached) or time.monotonic() > deadline:
                return cached
            await asyncio.sleep(0.02)

    async def _execute(self, handler: Handler, req: Request) -> dict[str, Any]:
        try:
            reply = await self.transactions.execute(self, handler, req)
        except CommandError as exc:
            reply = exc.document(retryable_write=transactions.retryable_write(req))
        except query.QueryError as exc:
            reply = CommandError(exc.code, str(exc)).document() | exc.details
        except StorageReadError as exc:
            reply = CommandError(1, str(exc)).document()
        reply.setdefault("ok", 1.0)
        transactions.label_error(req, reply)
        return reply

    async def _wait_after_failure(self, req: Request, reply: dict[str, Any]) -> None:
        """mongod waits for a failed write command's write concern too, on the newest write
        the member has (the client may have read it), and reports a writeConcernError beside
        the command's error: drivers raise that first. Only for a write concern the command
        names (the default's wait could outlast a fault the command failed in) and only on
        the primary (elsewhere the command failed for not being it)."""
        if "writeConcern" not in req.body or not self.node.writable:
            return
        try:
            error = await writeconcern.wait_for(
                self.node, self.node.last_applied, req.body["writeConcern"]
            )
        except CommandError:  # a write concern refused as such: the command's error stands
            return
        if error is not None:
            reply["writeConcernError"] = error

    # -- helpers -----------------------------------------------------------------------------

    def _new_statements(self, req: Request) -> int:
        """How many of a retryable write's statements are not applied yet (a retry's that
        were, none); 1 for any other command."""
        try:
            session = self.session_of(req) if "txnNumber" in req.body else None
        except CommandError:  # a stale txnNumber: the command's own handler refuses it
            return 1
        if session is None:
            return 1
        field = {"insert": "documents", "update": "updates", "delete": "deletes"}.get(
            req.name.lower()
        )
        count = len(req.body.get(field) or []) if field else 1
        return sum(1 for i in range(count) if self.done_before(session, _stmt_id(req, i)) is None)

    def _application_of(self, req: Request) -> str | None:
        """The application the connection's handshake named; noted before any fail point is
        consulted, so that failCommand's appName catches the handshake itself (as on mongod)."""
        if (app := req.handshake_application()) is not None:
            self.app_names[req.connection_id] = app
        return self.app_names.get(req.connection_id)

    def privileges_of(self, connection_id: int) -> list[dict[str, Any]]:
        login = self.logged_in.get(connection_id)
        if login is None:
            return []
        return [p for role, db in self.node.roles.get(login[0], [])
                for p in role_privileges(role, db)]  # fmt: skip

    def _unauthorized(self, req: Request) -> CommandError | None:
        """mongod's refusal of a command the user's roles do not allow (None: allowed)."""
        need = roles.required(req.name, req.db, req.body)
        if need is None or granted(self.privileges_of(req.connection_id), *need):
            return None
        return CommandError(13, f"not authorized on {req.db} to execute command "
                                f"{{ {req.name}: {req.body.get(req.name)!r} }}")  # fmt: skip

    def check_readable(self, req: Request) -> None:
        state = self.node.state
        if state is MemberState.PRIMARY:
            return
        if state is MemberState.SECONDARY:
            if not req.secondary_ok:
                raise CommandError(13435, "not primary and secondaryOk=false")
            return
        raise CommandError(13436, f"node is not in primary or recovering state ({state.name})")

    async def majority_read_barrier(self, req: Request) -> None:
        """readConcern majority: wait until what this member has applied is majority-committed;
        afterClusterTime (causal consistency): until it has applied that far."""
        concern = req.body.get("readConcern") or {}
        level = concern.get("level")
        deadline = time.monotonic() + int(req.body.get("maxTimeMS", 0) or 10_000) / 1000
        after = concern.get("afterClusterTime")
        if isinstance(after, Timestamp) and not self.ignore_after_cluster_time:
            node = self.node
            if node.last_applied.timestamp < after and node.writable:
                # A time another shard gave the client: a primary behind it writes a no-op past
                # it (as mongod's appendOplogNote) rather than wait for a write that may not come.
                node.clock.observe(after)
                node.write_noop("advancing to a causal read's afterClusterTime")
            while self.node.last_applied.timestamp < after:
                if time.monotonic() > deadline:
                    raise CommandError(50, "operation exceeded time limit")
                await self.node.progress.wait(deadline - time.monotonic())
        if level not in ("majority", "linearizable"):
            return
        target = self.node.last_applied
        while self.node.commit_point < target:
            if time.monotonic() > deadline:
                raise CommandError(50, "operation exceeded time limit")
            await self.node.progress.wait(deadline - time.monotonic())

    def open_cursor(
        self,
        ns: str,
        docs: list[dict[str, Any]],
        batch_size: int | None,
        single_batch: bool = False,
    ) -> dict[str, Any]:
        cursor = Cursor(ns, docs)
        batch = self._next_batch(cursor, batch_size if batch_size else DEFAULT_BATCH)
        cursor_id = 0
        if cursor.position < len(docs) and not single_batch:
            cursor_id = random.randint(1, 2**62)
            self.cursors[cursor_id] = cursor
        return {"cursor": {"firstBatch": batch, "id": Int64(cursor_id), "ns": ns}}

    @staticmethod
    def _next_batch(cursor: Cursor, batch_size: int | None) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        size = 0
        while cursor.position < len(cursor.docs):
            if batch_size and len(out) >= batch_size:
                break
            doc = cursor.docs[cursor.position]
            size += len(str(doc))  # a cheap bound; exact sizes are not worth encoding twice
            if out and size > MAX_BATCH_BYTES:
                break
            out.append(doc)
            cursor.position += 1
        return out

    async def finish_write(
        self, req: Request, reply: dict[str, Any], optime: OpTime | None
    ) -> dict[str, Any]:
        """Wait for the write concern of a write that changed something; attach its error."""
        wc = req.body.get("writeConcern") or {}
        if optime is None:
            optime = self.node.last_applied
        error = await writeconcern.wait_for(self.node, optime, wc)
        if error is not None:
            reply["writeConcernError"] = error
            label_retryable_write_concern_error(req, reply)
        if self.node.state is MemberState.PRIMARY:
            reply["electionId"] = self.node.election_id()
            reply["opTime"] = optime.document()
        return reply

    def session_of(self, req: Request) -> tuple[dict[str, Any], int] | None:
        lsid, txn = req.body.get("lsid"), req.body.get("txnNumber")
        if lsid is None or txn is None:
            return None
        newest = self.node.store.txn_number(lsid)
        if newest is not None and newest > int(txn):
            raise CommandError(225, f"txnNumber {txn} is older than the session's {newest}")
        return lsid, int(txn)

    def done_before(
        self, session: tuple[dict[str, Any], int] | None, stmt: int
    ) -> dict[str, Any] | None:
        """A retried statement's recorded result, if it was already applied."""
        if session is None:
            return None
        return self.node.store.statement_result(session[0], session[1], stmt)

    @staticmethod
    def session_fields(
        session: tuple[dict[str, Any], int] | None, stmt: int, result: dict[str, Any]
    ) -> dict[str, Any] | None:
        if session is None:
            return None
        return {"lsid": session[0], "txnNumber": Int64(session[1]), "stmtId": stmt, "res": result}


def _takes_write_concern(req: Request) -> bool:
    """A write command, or an aggregation ending in $out or $merge; not inside a transaction
    (its statements take none)."""
    if transactions.in_transaction(req.body):
        return False
    name = req.name.lower()
    if name == "aggregate":
        stages = req.body.get("pipeline")
        last = stages[-1] if isinstance(stages, list) and stages else None
        return isinstance(last, dict) and any(k in pipeline.OUTPUT_STAGES for k in last)
    return name in _WRITE_CONCERN_COMMANDS


def label_retryable_write_concern_error(req: Request, reply: dict[str, Any]) -> None:
    """As servers 4.4+ do: a retryable write whose writeConcernError has a retryable code
    carries the RetryableWriteError label (drivers retry on the label, not the code)."""
    code = (reply.get("writeConcernError") or {}).get("code")
    if transactions.retryable_write(req) and code in RETRYABLE_WRITE_CODES:
        labels = reply.setdefault("errorLabels", [])
        if "RetryableWriteError" not in labels:
            labels.append("RetryableWriteError")


async def keep_cursors_bounded(cmds: Commands) -> None:
    """Drop cursors beyond a generous count so abandoned ones cannot grow memory forever."""
    while True:
        await asyncio.sleep(60)
        excess = len(cmds.cursors) - 10_000
        for cid in list(cmds.cursors)[: max(excess, 0)]:
            del cmds.cursors[cid]


def _standalone_refusal(req: Request) -> CommandError | None:
    """What a mongod started without --replSet refuses: replica-set commands, transaction
    numbers (retryable writes), and a write concern that needs more than one server."""
    if req.name.lower().startswith("replset"):
        return CommandError(76, "not running with --replSet")
    if "txnNumber" in req.body:
        return CommandError(
            20, "Transaction numbers are only allowed on a replica set member or mongos"
        )
    w = (req.body.get("writeConcern") or {}).get("w")
    if isinstance(w, int) and not isinstance(w, bool) and w > 1:
        return CommandError(2, "cannot use 'w' > 1 on a standalone server")
    return None
