"""Multi-document transactions and snapshot reads, as a replica-set primary runs them.

A transaction belongs to a session (`lsid`) and has a number (`txnNumber`); its statements carry
`autocommit: false`, the first one also `startTransaction: true` and the read concern. A
statement runs the ordinary command handler against stand-ins for the member: its store reads
from the snapshot taken at the first statement with the transaction's own writes laid over it,
and its writes are kept in the transaction instead of applied. commitTransaction writes them all
as one `applyOps` oplog entry, which carries the session, so a retried commit, even on a new
primary, finds the transaction committed. Any failing statement, abortTransaction, a stepdown,
killing the session or outliving transactionLifetimeLimitSeconds drops the writes.

A transaction writing a document that another open transaction wrote, or that anyone changed
since its snapshot, gets WriteConflict. A write outside any transaction that targets a document
an open transaction wrote waits until that transaction ends, as on mongod (up to its maxTimeMS).

A read with readConcern `snapshot` outside a transaction reads at `atClusterTime` (or at the
newest majority-committed point, which its reply then names), from the same snapshot history.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import bson
from bson.timestamp import Timestamp

from rsdrill.sandbox.config import UNSAFE_SNAPSHOT_ENV
from rsdrill_emulator import query, updatediff
from rsdrill_emulator.datastore import id_key, session_key
from rsdrill_emulator.errors import (
    RETRYABLE_WRITE_CODES,
    CommandError,
    write_concern_error,
)
from rsdrill_emulator.prepared import ABORT_STATEMENT, session_fields, wait_unprepared
from rsdrill_emulator.snapshot import SnapshotTooOld, SnapshotView, stamp

if TYPE_CHECKING:
    from rsdrill_emulator.node import Node
    from rsdrill_emulator.oplog import OpTime
    from rsdrill_emulator.request import Request

Document = dict[str, Any]
Handler = Callable[[Any, "Request"], Awaitable[dict[str, Any]]]


class Commands(Protocol):
    """What a transaction needs of the command dispatcher that runs its statements (the
    dispatcher, `commands.Commands`, is one; so is `StatementCommands`, which wraps it)."""

    node: Node

    async def finish_write(
        self, req: Request, reply: dict[str, Any], optime: OpTime | None
    ) -> dict[str, Any]: ...

    async def majority_read_barrier(self, req: Request) -> None: ...


# mongod's transactionLifetimeLimitSeconds: an open transaction older than this is aborted.
LIFETIME_S = 60.0
# The statement id a commit is recorded under in the session table (clients' ids are >= 0).
COMMIT_STATEMENT = -1
# The end of a transaction (its prepare, and a router's recovery of a commit decision too).
COMMIT_OR_ABORT = frozenset(
    {"committransaction", "aborttransaction", "coordinatecommittransaction", "preparetransaction"}
)
# What may run inside a transaction (others: OperationNotSupportedInTransaction).
STATEMENTS = frozenset(
    {"find", "getmore", "killcursors", "insert", "update", "delete", "findandmodify"}
    | {"aggregate", "distinct", "create", "createindexes"}
)
# Writes outside transactions, which wait for the documents open transactions hold.
_WRITES = frozenset({"insert", "update", "delete", "findandmodify"})
# How often a write waiting for a transaction's documents looks again: transactions also end
# without notice (a stepdown, the lifetime limit), so it polls.
_WAIT_POLL_S = 0.01
# What may read at a snapshot outside a transaction.
SNAPSHOT_READS = frozenset({"find", "aggregate", "distinct", "getmore", "killcursors"})
# Codes mongod labels TransientTransactionError (the whole transaction may be retried):
# WriteConflict, LockTimeout, SnapshotTooOld, SnapshotUnavailable, PreparedTransactionInProgress.
_TRANSIENT = frozenset({112, 24, 239, 246, 267})
NO_SUCH_TRANSACTION = 251
PREPARED_TRANSACTION_IN_PROGRESS = 267


def in_transaction(body: dict[str, Any]) -> bool:
    """The command is a statement of a transaction (or its commit or abort)."""
    return "autocommit" in body and "txnNumber" in body


def retryable_write(req: Request) -> bool:
    """Whether a failure of this command is labelled as a retryable write's: retryable writes,
    and a transaction's commit and abort (drivers retry those once)."""
    return "txnNumber" in req.body and (
        not in_transaction(req.body) or req.name.lower() in COMMIT_OR_ABORT
    )


def label_error(req: Request, reply: dict[str, Any]) -> None:
    """Add TransientTransactionError to a failed statement's reply where mongod does: the
    transaction had no lasting effect and may be run again from its start."""
    if not in_transaction(req.body) or reply.get("ok", 1) or "code" not in reply:
        return
    code = int(reply["code"])
    if req.name.lower() in COMMIT_OR_ABORT:
        # A commit that failed with NoSuchTransaction after a write concern error may have
        # committed on a member that later rolled back: not safe to run again.
        transient = code in _TRANSIENT or (
            code == NO_SUCH_TRANSACTION and "writeConcernError" not in reply
        )
    else:
        transient = code in _TRANSIENT or code == NO_SUCH_TRANSACTION
        transient = transient or code in RETRYABLE_WRITE_CODES
    if transient:
        dropped = ("RetryableWriteError", "TransientTransactionError")  # the latter kept once
        labels = [x for x in reply.get("errorLabels", []) if x not in dropped]
        reply["errorLabels"] = [*labels, "TransientTransactionError"]


def no_such_transaction(number: int, why: str = "has been aborted") -> CommandError:
    return CommandError(NO_SUCH_TRANSACTION, f"Transaction with txnNumber {number} {why}.")


def written_since_snapshot(node: Node, txn: Transaction) -> bool:
    """A document the transaction wrote was changed outside it since its snapshot."""
    since = stamp(txn.read_at)
    return any(node.history.changed_after(ns, key, since)
               for ns, keys in txn.changes.items() for key in keys)  # fmt: skip


@dataclass
class Transaction:
    """One session's transaction on this member while it is primary."""

    lsid: dict[str, Any]
    number: int
    term: int
    read_at: Timestamp
    retries: int = 0  # its txnRetryCounter
    started: float = field(default_factory=time.monotonic)
    state: str = "in progress"  # "prepared", "committed", "aborted"
    # ns → id key → the document as the transaction left it (None: it deleted it).
    changes: dict[str, dict[bytes, Document | None]] = field(default_factory=dict)
    created: set[str] = field(default_factory=set)
    # The writes to commit, in order, as applyOps operations.
    ops: list[dict[str, Any]] = field(default_factory=list)
    commit_optime: OpTime | None = None

    @property
    def open(self) -> bool:
        return self.state == "in progress"

    def abort(self) -> None:
        if self.open:
            self.state = "aborted"
            self.changes.clear()
            self.ops.clear()

    def may_start_again(self, number: int, retry_counter: int) -> bool:
        """A router starts a transaction again (its first statement met too old a snapshot)
        with a greater txnRetryCounter, as mongos: only one its first statement aborted."""
        return (self.number, self.state) == (number, "aborted") and retry_counter > self.retries

    def end_if_stale(self, term: int) -> None:
        """A stepdown since it began (a new term) or the lifetime limit aborts it."""
        if self.open and (self.term != term or time.monotonic() - self.started > LIFETIME_S):
            self.abort()

    def holds(self, ns: str, key: bytes) -> bool:
        return self.open and key in self.changes.get(ns, {})


class TransactionMember:
    """The member as a command handler sees it inside a transaction or a snapshot read: reads
    from `store` (a snapshot view), writes kept in the transaction. Anything else is the
    member's own."""

    def __init__(
        self, node: Node, store: SnapshotView, txn: Transaction | None, table: Transactions
    ) -> None:
        self._node = node
        self.store = store
        self._txn = txn
        self._table = table

    def write(
        self,
        op: str,
        ns: str,
        o: dict[str, Any],
        *,
        o2: dict[str, Any] | None = None,
        session: dict[str, Any] | None = None,
    ) -> OpTime:
        txn = self._txn
        if txn is None:
            raise CommandError(72, "cannot write in a read with readConcern snapshot")
        self._node.require_writable()
        if op in ("i", "u", "d"):
            doc_id = (o2 or o)["_id"] if op == "u" else o["_id"]
            key = id_key(doc_id)
            if self._table.held_elsewhere(self._node, txn, ns, key) or (
                self._node.history.changed_after(ns, key, stamp(txn.read_at))
            ):
                raise CommandError(
                    112,
                    "Caused by :: Write conflict during plan execution and yielding is "
                    "disabled. :: Please retry your operation or multi-document transaction.",
                )
            if op == "d":
                after = None
            elif op == "u" and updatediff.is_diff(o):
                current = self.store.get(ns, doc_id)
                if current is None:  # the update found it in this transaction's snapshot
                    raise CommandError(112, "Caused by :: Write conflict: the document is gone.")
                after = updatediff.apply(current, o["diff"])
            else:
                after = o
            txn.changes.setdefault(ns, {})[key] = after
        elif op == "c" and "create" in o:
            txn.created.add(f"{ns.split('.', 1)[0]}.{o['create']}")
        elif op != "c" or "createIndexes" not in o:
            raise CommandError(263, f"Cannot run {o!r} in a multi-document transaction.")
        txn.ops.append({"op": op, "ns": ns, "o": o, **({"o2": o2} if o2 else {})})
        return self._node.last_applied

    def __getattr__(self, name: str) -> Any:
        return getattr(self._node, name)


class StatementCommands:
    """The dispatcher as a handler sees it inside a transaction or a snapshot read: no
    retryable-write records, no write-concern wait (the commit has the write concern), and the
    read concern was applied when the snapshot was taken."""

    def __init__(self, cmds: Commands, member: TransactionMember) -> None:
        self._cmds = cmds
        self.node = member

    def session_of(self, req: Request) -> None:
        return None

    async def finish_write(
        self, req: Request, reply: dict[str, Any], optime: OpTime | None
    ) -> dict[str, Any]:
        return reply

    async def majority_read_barrier(self, req: Request) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cmds, name)


class Transactions:
    """The member's transactions, one a session, and how commands reach them."""

    def __init__(self) -> None:
        self._by_session: dict[bytes, Transaction] = {}
        # The deliberately broken server of the checker's tests: statements read the newest
        # data (read when the member starts, not when the module is imported: a zygote's
        # members take the environment of their own start).
        self._unsafe_snapshot = os.environ.get(UNSAFE_SNAPSHOT_ENV) == "1"

    async def execute(self, cmds: Commands, handler: Handler, req: Request) -> dict[str, Any]:
        """Run a command: as a transaction's statement, as a snapshot read, or as it is."""
        name = req.name.lower()
        if in_transaction(req.body):
            if name not in COMMIT_OR_ABORT:
                return await self._statement(cmds, handler, req)
        elif (req.body.get("readConcern") or {}).get("level") == "snapshot":
            return await self._snapshot_read(cmds, handler, req)
        elif name in _WRITES and (
            len(cmds.node.prepared) or any(t.open and t.changes for t in self._by_session.values())
        ):
            await self._wait_for_held_documents(cmds.node, req)
        return await handler(cmds, req)

    # -- writes outside transactions -------------------------------------------------------

    async def _wait_for_held_documents(self, node: Node, req: Request) -> None:
        """Wait while an open transaction holds a document this write targets: an `_id` it
        inserts, or a document whose committed version its filters match."""
        coll = req.body.get(req.name)
        if not isinstance(coll, str):
            return
        ns = f"{req.db}.{coll}"
        body = req.body
        inserted = {id_key(d["_id"]) for d in body.get("documents") or [] if "_id" in d}
        filters = [spec.get("q") or {} for spec in body.get("updates") or []]
        filters += [spec.get("q") or {} for spec in body.get("deletes") or []]
        if req.name.lower() == "findandmodify":
            filters.append(body.get("query") or {})
        predicates = [query.compile_filter(f) for f in filters]
        max_ms = int(body.get("maxTimeMS") or 0)
        deadline = time.monotonic() + max_ms / 1000 if max_ms else None

        def blocked() -> bool:
            if any(node.prepared.holds(ns, key) for key in inserted):
                return True
            for key in (k for p in node.prepared.holding(ns) for k in p):
                committed = node.store.get(ns, bson.decode(key)[""])
                if committed is not None and any(pred(committed) for pred in predicates):
                    return True
            for txn in self._by_session.values():
                txn.end_if_stale(node.term)
                for key in txn.changes.get(ns, {}):
                    if key in inserted:
                        return True
                    committed = node.store.get(ns, bson.decode(key)[""])
                    if committed is not None and any(p(committed) for p in predicates):
                        return True
            return False

        while blocked():
            if deadline is not None and time.monotonic() > deadline:
                raise CommandError(50, "operation exceeded time limit")
            await asyncio.sleep(_WAIT_POLL_S)

    # -- statements ------------------------------------------------------------------------

    async def _statement(self, cmds: Commands, handler: Handler, req: Request) -> dict[str, Any]:
        node = cmds.node
        body = req.body
        if body.get("autocommit") is not False:
            raise CommandError(72, "Specifying autocommit=true is not allowed.")
        if req.name.lower() not in STATEMENTS:
            raise CommandError(263, f"Cannot run '{req.name}' in a multi-document transaction.")
        if "writeConcern" in body:
            raise CommandError(72, "Cannot set write concern after starting a transaction.")
        node.require_writable()
        txn = await self._begin(cmds, req) if body.get("startTransaction") else self._find(req)
        if txn.state == "prepared" or node.prepared.find(txn.lsid, txn.number):
            raise CommandError(PREPARED_TRANSACTION_IN_PROGRESS,
                               "cannot run a statement in a prepared transaction")  # fmt: skip
        if not txn.open:
            raise no_such_transaction(txn.number)
        if "readConcern" in body and not body.get("startTransaction"):
            txn.abort()
            raise CommandError(72, "Only the first command in a transaction may specify a "
                                   "readConcern")  # fmt: skip
        self.check_alive(node, txn)
        try:
            node.history.want(node.last_applied.timestamp)
            read_at = node.last_applied.timestamp if self._unsafe_snapshot else txn.read_at
            node.history.check(read_at)
            await wait_unprepared(node.prepared, req, read_at)
            view = SnapshotView(node.store, node.history, read_at, txn.changes, txn.created)
            member = TransactionMember(node, view, txn, self)
            reply = await handler(StatementCommands(cmds, member), req)
        except SnapshotTooOld as exc:
            txn.abort()
            raise CommandError(239, str(exc)) from None
        except Exception:
            txn.abort()  # a failed statement ends its transaction, as on mongod
            raise
        if reply.get("writeErrors"):
            txn.abort()
        return reply

    async def _begin(self, cmds: Commands, req: Request) -> Transaction:
        node = cmds.node
        lsid, number = req.body["lsid"], int(req.body["txnNumber"])
        current = self._by_session.get(session_key(lsid))
        newest = node.store.txn_number(lsid)
        if (current is not None and number < current.number) or (
            newest is not None and number < newest
        ):
            raise CommandError(225, f"txnNumber {number} is less than the session's last one")
        retry = int(req.body.get("txnRetryCounter", 0))
        again = current is not None and current.may_start_again(number, retry)
        if not again and ((current is not None and number == current.number) or newest == number):
            raise CommandError(
                217, f"txnNumber {number} for this session has already been used"
            )  # ConflictingOperationInProgress
        if node.prepared.of_session(lsid) is not None:  # every member's record of it
            raise CommandError(PREPARED_TRANSACTION_IN_PROGRESS, "the session's transaction "
                               "is prepared: only its commit or abort may follow")  # fmt: skip
        if current is not None:
            current.abort()  # a newer transaction of the session ends the older one
        self._forget_finished()
        concern = dict(req.body.get("readConcern") or {})
        level = concern.get("level", "local")
        if level not in ("local", "majority", "snapshot"):
            raise CommandError(72, f"The readConcern level {level!r} is not supported in a "
                                   "transaction")  # fmt: skip
        at = concern.pop("atClusterTime", None) if level == "snapshot" else None
        if at is not None:
            concern["afterClusterTime"] = at
        if level == "snapshot" and at is None:
            concern["level"] = "majority"  # the newest majority-committed snapshot
        await cmds.majority_read_barrier(
            dataclasses.replace(req, body={**req.body, "readConcern": concern})
        )
        node.history.want(node.last_applied.timestamp)
        txn = Transaction(lsid, number, node.term, at or node.last_applied.timestamp, retry)
        self._by_session[session_key(lsid)] = txn
        return txn

    def _forget_finished(self) -> None:
        """Drop transactions that ended long ago (a retried commit of one is answered from the
        session table), so sessions that come and go do not grow memory."""
        horizon = time.monotonic() - LIFETIME_S
        for key, txn in list(self._by_session.items()):
            if not txn.open and txn.started < horizon:
                del self._by_session[key]

    def _find(self, req: Request) -> Transaction:
        number = int(req.body["txnNumber"])
        txn = self._by_session.get(session_key(req.body["lsid"]))
        if txn is None or txn.number != number:
            raise no_such_transaction(number, "does not match any in-progress transaction")
        return txn

    def current(self, lsid: dict[str, Any], number: int) -> Transaction | None:
        txn = self._by_session.get(session_key(lsid))
        return txn if txn is not None and txn.number == number else None

    @staticmethod
    def check_alive(node: Node, txn: Transaction) -> None:
        txn.end_if_stale(node.term)
        if not txn.open:
            raise no_such_transaction(txn.number)

    def held_elsewhere(self, node: Node, txn: Transaction, ns: str, key: bytes) -> bool:
        """Another open or prepared transaction has written this document."""
        if node.prepared.holds(ns, key):
            return True
        for other in self._by_session.values():
            if other is not txn:
                other.end_if_stale(node.term)
                if other.holds(ns, key):
                    return True
        return False

    # -- commit and abort ------------------------------------------------------------------

    async def commit(self, cmds: Commands, req: Request) -> dict[str, Any]:
        """commitTransaction: write the transaction as one oplog entry, wait for the write
        concern. Again after it committed: only the write concern (a client retrying)."""
        node = cmds.node
        node.require_writable()
        lsid, number = req.body["lsid"], int(req.body["txnNumber"])
        txn = self._by_session.get(session_key(lsid))
        if txn is None or txn.number != number:
            if node.store.statement_result(lsid, number, COMMIT_STATEMENT) is not None:
                return await self.commit_concern(cmds, req, None)  # committed before a failover
            raise no_such_transaction(number, "does not match any in-progress transaction")
        if txn.state == "committed":
            return await self.commit_concern(cmds, req, txn.commit_optime)
        self.check_alive(node, txn)
        if not txn.open:
            raise no_such_transaction(number)
        if written_since_snapshot(node, txn):
            # Written outside any transaction since the snapshot: an upsert that found nothing
            # to wait for when it started.
            txn.abort()
            raise CommandError(112, "Write conflict at commit")
        if txn.ops:
            session = session_fields(lsid, number, COMMIT_STATEMENT, {"committed": True})
            txn.commit_optime = node.write("c", "admin.$cmd", {"applyOps": txn.ops},
                                           session=session)  # fmt: skip
        txn.state = "committed"
        txn.changes.clear()
        return await self.commit_concern(cmds, req, txn.commit_optime)

    @staticmethod
    async def commit_concern(cmds: Commands, req: Request, optime: OpTime | None) -> dict[str, Any]:
        """Wait for the commit's write concern, within its maxTimeMS (maxCommitTimeMS) too:
        past that, as mongod, a MaxTimeMSExpired writeConcernError (committed, not yet
        replicated far enough)."""
        max_ms = int(req.body.get("maxTimeMS") or 0)
        concern = dict(req.body.get("writeConcern") or {})
        if not max_ms or 0 < int(concern.get("wtimeout") or 0) <= max_ms:
            return await cmds.finish_write(req, {}, optime)
        bounded = {**req.body, "writeConcern": {**concern, "wtimeout": max_ms}}
        reply = await cmds.finish_write(dataclasses.replace(req, body=bounded), {}, optime)
        if (reply.get("writeConcernError") or {}).get("code") == 64:
            reply["writeConcernError"] = write_concern_error(50, "operation exceeded time limit")
        return reply

    async def recover_decision(self, cmds: Commands, req: Request) -> dict[str, Any]:
        """coordinateCommitTransaction without participants, as a router that did not run
        the transaction sends it to the recovery shard: the commit's outcome if it committed
        here; otherwise NoSuchTransaction, an open one aborted (no commit can follow)."""
        node = cmds.node
        node.require_writable()
        lsid, number = req.body["lsid"], int(req.body["txnNumber"])
        while node.prepared.find(lsid, number) is not None:
            # Prepared here, its decision not yet known here: it will be (SERVER-40808).
            await node.prepared.changed(1.0)
            node.require_writable()
        txn = self._by_session.get(session_key(lsid))
        if txn is not None and txn.number == number and txn.state == "committed":
            return await self.commit_concern(cmds, req, txn.commit_optime)
        if node.store.statement_result(lsid, number, COMMIT_STATEMENT) is not None:
            return await self.commit_concern(cmds, req, None)
        if txn is not None and txn.number == number and txn.open:
            txn.abort()
        raise no_such_transaction(number, "was not found on the coordinator (no decision)")

    def ended(self, node: Node, lsid: dict[str, Any], number: int) -> bool:
        """This member's part of the transaction was committed or aborted."""
        txn = self.current(lsid, number)
        if txn is not None and txn.state in ("committed", "aborted"):
            return True
        return any(node.store.statement_result(lsid, number, stmt) is not None
                   for stmt in (COMMIT_STATEMENT, ABORT_STATEMENT))  # fmt: skip

    async def abort(self, cmds: Commands, req: Request) -> dict[str, Any]:
        """abortTransaction: drop the transaction's writes."""
        node = cmds.node
        node.require_writable()
        lsid, number = req.body["lsid"], int(req.body["txnNumber"])
        txn = self._by_session.get(session_key(lsid))
        committed = (txn is not None and txn.number == number and txn.state == "committed") or (
            node.store.statement_result(lsid, number, COMMIT_STATEMENT) is not None
        )
        if committed:
            raise CommandError(256, f"Transaction with txnNumber {number} has been committed.")
        if txn is None or txn.number != number:
            raise no_such_transaction(number, "does not match any in-progress transaction")
        self.check_alive(node, txn)
        txn.abort()
        return await cmds.finish_write(req, {}, None)

    def end_sessions(self, lsids: list[dict[str, Any]] | None) -> None:
        """endSessions / killSessions (None: killAllSessions): their transactions abort."""
        keys = None if lsids is None else {session_key(lsid) for lsid in lsids}
        for key, txn in list(self._by_session.items()):
            if keys is None or key in keys:
                txn.abort()
                del self._by_session[key]

    # -- snapshot reads --------------------------------------------------------------------

    async def _snapshot_read(
        self, cmds: Commands, handler: Handler, req: Request
    ) -> dict[str, Any]:
        if req.name.lower() not in SNAPSHOT_READS:
            raise CommandError(72, f"{req.name} does not support readConcern level snapshot "
                                   "outside a transaction")  # fmt: skip
        node = cmds.node
        concern = req.body["readConcern"]
        at = concern.get("atClusterTime")
        wait = {"afterClusterTime": at} if at is not None else {"level": "majority"}
        await cmds.majority_read_barrier(
            dataclasses.replace(req, body={**req.body, "readConcern": wait})
        )
        node.history.want(node.last_applied.timestamp)
        if at is None:
            at = node.last_applied.timestamp
        try:
            node.history.check(at)
        except SnapshotTooOld as exc:
            raise CommandError(239, str(exc)) from None
        await wait_unprepared(node.prepared, req, at)
        member = TransactionMember(node, SnapshotView(node.store, node.history, at), None, self)
        reply = await handler(StatementCommands(cmds, member), req)
        if isinstance(reply.get("cursor"), dict):
            reply["cursor"]["atClusterTime"] = at
        else:
            reply["atClusterTime"] = at
        return reply
