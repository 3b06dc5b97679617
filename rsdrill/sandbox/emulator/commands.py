"""Client commands: what each one means for a member, with MongoDB's reply shapes and errors."""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import os
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeGuard

from bson.binary import Binary
from bson.int64 import Int64
from bson.objectid import ObjectId
from bson.timestamp import Timestamp

from rsdrill.privileges import granted
from rsdrill.sandbox.certs import CLIENT_SUBJECT, MEMBER_SUBJECT
from rsdrill.sandbox.config import ReplSetSpec
from rsdrill.sandbox.emulator import (
    aws_login,
    changestream,
    election,
    expressions,
    heartbeat,
    indexes,
    pipeline,
    query,
    roles,
    sync,
    transactions,
    updatediff,
    validation,
    values,
    wallclock,
)
from rsdrill.sandbox.emulator.datastore import id_key
from rsdrill.sandbox.emulator.errors import (
    RETRYABLE_WRITE_CODES,
    CommandError,
    attach_topology_version,
)
from rsdrill.sandbox.emulator.failpoint import (
    AFTER_CURSOR_CHECKOUT,
    STOP_REPLICATION,
    CloseConnection,
    FailPoint,
)
from rsdrill.sandbox.emulator.node import MemberState, Node
from rsdrill.sandbox.emulator.oplog import NULL_OPTIME, OpTime
from rsdrill.sandbox.emulator.peer import PeerError
from rsdrill.sandbox.emulator.storage import StorageReadError
from rsdrill.scram import ScramError, ScramServer

MAX_BATCH_BYTES = 16 * 1024 * 1024
DEFAULT_BATCH = 101


@dataclass(frozen=True)
class ServerVersion:
    """The MongoDB release the emulator claims: 7.0, or the last one before hello (4.4.2)."""

    version: str
    array: tuple[int, int, int, int]
    max_wire: int


CURRENT = ServerVersion("7.0.0", (7, 0, 0, 0), 21)
LEGACY = ServerVersion("4.4.1", (4, 4, 1, 0), 9)
OPLOG_NS = "local.oplog.rs"


@dataclass
class Request:
    """One command as the dispatcher sees it."""

    db: str
    name: str
    body: dict[str, Any]
    secondary_ok: bool
    connection_id: int


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

Handler = Callable[["Commands", Request], Awaitable[dict[str, Any]]]
_HANDLERS: dict[str, Handler] = {}


def command(*names: str) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        for name in names:
            _HANDLERS[name.lower()] = fn
        return fn

    return register


def _ns(req: Request, key: str | None = None) -> str:
    coll = req.body.get(key or req.name)
    if not isinstance(coll, str) or not coll:
        raise CommandError(73, f"Invalid namespace specified for {req.name}")
    return f"{req.db}.{coll}"


class Commands:
    """Dispatches commands for one member; owns its cursors and counters."""

    def __init__(self, node: Node) -> None:
        self.node = node
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
        try:
            reply = await self._run(req)
        finally:
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
            error = await self.node.wait_for_write_concern(
                self.node.last_applied, req.body["writeConcern"]
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
        if req.name.lower() in ("hello", "ismaster"):
            app = ((req.body.get("client") or {}).get("application") or {}).get("name")
            if isinstance(app, str):
                self.app_names[req.connection_id] = app
        return self.app_names.get(req.connection_id)

    def privileges_of(self, connection_id: int) -> list[dict[str, Any]]:
        login = self.logged_in.get(connection_id)
        if login is None:
            return []
        return [p for role, db in self.node.roles.get(login[0], [])
                for p in roles.privileges(role, db)]  # fmt: skip

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
        if isinstance(after, Timestamp):
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
        error = await self.node.wait_for_write_concern(optime, wc)
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


# -- handshake and server info ----------------------------------------------------------------


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


@command("hello", "isMaster", "ismaster")
async def _hello(cmds: Commands, req: Request) -> dict[str, Any]:
    node = cmds.node
    tv = req.body.get("topologyVersion")
    max_await = req.body.get("maxAwaitTimeMS")
    if (tv is None) != (max_await is None):
        raise CommandError(31368, "hello needs both or neither of topologyVersion and "
                                  "maxAwaitTimeMS")  # fmt: skip
    if tv is not None and max_await is not None:
        await _await_topology_change(node, tv, int(max_await))
    return hello_reply(node, req)


async def _await_topology_change(node: Node, tv: dict[str, Any], max_await_ms: int) -> None:
    """Awaitable hello (4.4+): answer at once if the client's topologyVersion is not the
    current one, otherwise when it changes or after maxAwaitTimeMS."""
    if max_await_ms < 0:
        raise CommandError(31373, "maxAwaitTimeMS must be a non-negative integer")
    if tv.get("processId") != node.process_id:
        return  # the client knows an earlier incarnation of this member
    counter = int(tv.get("counter", -1))
    if counter > node.topology_counter:
        raise CommandError(31382, f"topologyVersion counter {counter} is greater than the "
                                  f"server's, {node.topology_counter}")  # fmt: skip
    if counter == node.topology_counter:
        await node.topology_changed.wait(max_await_ms / 1000)


def hello_reply(node: Node, req: Request) -> dict[str, Any]:
    """hello / isMaster as a replica-set member (or a standalone server) answers it."""
    spec = node.spec
    legacy = req.name.lower() == "ismaster"
    writable = node.state is MemberState.PRIMARY and node.writable
    reply: dict[str, Any] = {
        "topologyVersion": node.topology_version(),
        "ismaster" if legacy else "isWritablePrimary": writable,
        "secondary": node.state is MemberState.SECONDARY and not spec.standalone,
    }
    if req.body.get("helloOk") and spec.handshake != "legacy":  # a server without hello: no
        reply["helloOk"] = True
    asked = req.body.get("saslSupportedMechs")
    if node.auth_keys is not None and isinstance(asked, str):
        user = asked.partition(".")[2]
        reply["saslSupportedMechs"] = [m for m, users in node.auth_keys.items() if user in users]
    reply.update(
        maxBsonObjectSize=16 * 1024 * 1024,
        maxMessageSizeBytes=48_000_000,
        maxWriteBatchSize=100_000,
        localTime=wallclock.now(),
        logicalSessionTimeoutMinutes=30,
        connectionId=req.connection_id,
        minWireVersion=0,
        maxWireVersion=claimed(spec).max_wire,
        readOnly=False,
    )
    if spec.standalone:  # mongod without --replSet: nothing of a replica set
        return reply
    reply.update(
        setName=spec.set_name,
        setVersion=1,
        hosts=[m.host for m in spec.members if not m.arbiter_only and m.priority > 0],
        me=node.host,
    )
    passives = [m.host for m in spec.members if not m.arbiter_only and m.priority == 0]
    if passives:
        reply["passives"] = passives
    arbiters = [m.host for m in spec.members if m.arbiter_only]
    if arbiters:
        reply["arbiters"] = arbiters
    if node.primary_host:
        reply["primary"] = node.primary_host
    if node.is_arbiter:
        reply["arbiterOnly"] = True
    if node.state is MemberState.PRIMARY:
        reply["electionId"] = node.election_id()
    if not node.is_arbiter:
        reply["lastWrite"] = {
            "opTime": node.last_applied.document(),
            "lastWriteDate": node.last_applied_wall.replace(microsecond=0),
            "majorityOpTime": node.commit_point.document(),
            "majorityWriteDate": node.commit_point.date(),
        }
    return reply


@command("saslStart")
async def _sasl_start(cmds: Commands, req: Request) -> dict[str, Any]:
    keys = cmds.node.auth_keys
    mechanism = req.body.get("mechanism")
    if mechanism == aws_login.MECHANISM and keys is not None and cmds.node.spec.aws_sts_url:
        payload = bytes(req.body.get("payload") or b"")
        cmds.logins[req.connection_id], reply = aws_login.start(
            cmds.node.spec.aws_sts_url, req.db, payload
        )
        return reply
    if keys is None:  # as mongod without users: nobody to log in as
        raise CommandError(18, "Authentication failed.")
    if mechanism not in keys:
        raise CommandError(2, f"mechanism {mechanism!r} is not supported")
    login = ScramServer(mechanism, keys[mechanism])
    try:
        payload = login.first(bytes(req.body.get("payload") or b""))
    except ScramError:
        raise CommandError(18, "Authentication failed.") from None
    cmds.logins[req.connection_id] = login
    return {"conversationId": 1, "done": False, "payload": Binary(payload)}


@command("saslContinue")
async def _sasl_continue(cmds: Commands, req: Request) -> dict[str, Any]:
    login = cmds.logins.get(req.connection_id)
    if req.connection_id in cmds.logged_in:  # the client's last, empty step
        return {"conversationId": 1, "done": True, "payload": Binary(b"")}
    if login is None:
        raise CommandError(17, "no SASL session state found")
    if isinstance(login, aws_login.AwsConversation):
        del cmds.logins[req.connection_id]
        payload = bytes(req.body.get("payload") or b"")
        user, reply = await aws_login.finish(login, payload, cmds.node.aws_users, cmds.node.events)
        cmds.logged_in[req.connection_id] = (user, "$external")
        return reply
    try:
        payload = login.final(bytes(req.body.get("payload") or b""))
    except ScramError:
        cmds.logins.pop(req.connection_id, None)
        raise CommandError(18, "Authentication failed.") from None
    cmds.logged_in[req.connection_id] = (login.user, req.db)
    del cmds.logins[req.connection_id]
    # Done at once, as with skipEmptyExchange; a client that sends the empty step anyway is
    # answered above.
    return {"conversationId": 1, "done": True, "payload": Binary(payload)}


@command("authenticate")
async def _authenticate(cmds: Commands, req: Request) -> dict[str, Any]:
    """MONGODB-X509: the user is the subject of the certificate the connection presented."""
    if req.body.get("mechanism") != "MONGODB-X509":
        raise CommandError(2, f"unsupported mechanism {req.body.get('mechanism')!r}")
    if req.db != "$external":
        raise CommandError(2, "MONGODB-X509 authentication must be on the $external database")
    subject = cmds.certificate_subjects.get(req.connection_id)
    if not cmds.node.spec.x509 or subject is None:
        raise CommandError(18, "No verified subject name available from client")
    named = req.body.get("user")
    if named is not None and named != subject:
        raise CommandError(18, "There is no x.509 client certificate matching the user.")
    if subject not in (CLIENT_SUBJECT, MEMBER_SUBJECT):
        raise CommandError(11, f'Could not find user "{subject}" for db "$external"')
    cmds.logged_in[req.connection_id] = (subject, "$external")
    return {"dbname": "$external", "user": subject}


@command("connectionStatus")
async def _connection_status(cmds: Commands, req: Request) -> dict[str, Any]:
    """Who this connection is logged in as, with its roles and (showPrivileges) privileges."""
    login = cmds.logged_in.get(req.connection_id)
    users, held = [], []
    if login is not None:
        users = [{"user": login[0], "db": login[1]}]
        held = [{"role": role, "db": db} for role, db in cmds.node.roles.get(login[0], [])]
    info: dict[str, Any] = {"authenticatedUsers": users, "authenticatedUserRoles": held}
    if req.body.get("showPrivileges"):
        info["authenticatedUserPrivileges"] = cmds.privileges_of(req.connection_id)
    return {"authInfo": info}


@command("usersInfo")
async def _users_info(cmds: Commands, req: Request) -> dict[str, Any]:
    """The users defined on this database (SCRAM users on admin, certificate users on
    $external), or the ones named; any logged-in user may ask (mongod: viewUser, or itself)."""
    asked = req.body.get("usersInfo")
    names: set[str | None] | None = {asked} if isinstance(asked, str) else None
    if isinstance(asked, dict):
        names = {asked.get("user")}
    certificates = {CLIENT_SUBJECT, MEMBER_SUBJECT}
    users = []
    for user, held in cmds.node.roles.items():
        db = "$external" if user in certificates else "admin"
        if db == req.db and (names is None or user in names):
            roles = [{"role": role, "db": role_db} for role, role_db in held]
            users.append({"_id": f"{db}.{user}", "user": user, "db": db, "roles": roles})
    return {"users": users}


@command("ping")
async def _ping(cmds: Commands, req: Request) -> dict[str, Any]:
    return {}


def claimed(spec: ReplSetSpec) -> ServerVersion:
    return LEGACY if spec.handshake == "legacy" else CURRENT


def storage_engine(spec: ReplSetSpec) -> str:
    """The emulator's storage engine by its own name: never taken for WiredTiger."""
    return "rsdrill-memory" if spec.storage == "memory" else "rsdrill-sqlite"


@command("buildInfo", "buildinfo")
async def _build_info(cmds: Commands, req: Request) -> dict[str, Any]:
    version = claimed(cmds.node.spec)
    return {
        "version": version.version,
        "gitVersion": "rsdrill-sandbox",
        "versionArray": list(version.array),
        "bits": 64,
        "maxBsonObjectSize": 16 * 1024 * 1024,
        "storageEngines": [storage_engine(cmds.node.spec)],
    }


def _parameters(node: Node) -> dict[str, Any]:
    """The server parameters the emulator has (getParameter's answer to "*")."""
    version = claimed(node.spec).version.rsplit(".", 1)[0]
    return {
        "enableTestCommands": True,  # configureFailPoint is there, as test suites expect
        "featureCompatibilityVersion": {"version": version},
        "logicalSessionTimeoutMinutes": 30,
        "transactionLifetimeLimitSeconds": 60,
        "requireApiVersion": False,
    }


# Fields a driver may add to any command, beside the command's own.
_GENERIC_FIELDS = frozenset({"$db", "lsid", "$clusterTime", "$readPreference", "comment",
                             "txnNumber", "writeConcern", "maxTimeMS", "apiVersion", "apiStrict",
                             "apiDeprecationErrors"})  # fmt: skip


@command("getParameter")
async def _get_parameter(cmds: Commands, req: Request) -> dict[str, Any]:
    _admin_only(req)
    known = _parameters(cmds.node)
    if req.body.get("getParameter") == "*":
        return dict(known)
    asked = [k for k in req.body if k != "getParameter" and k not in _GENERIC_FIELDS]
    missing = [k for k in asked if k not in known]
    if missing or not asked:
        raise CommandError(72, "no option found to get")
    return {k: known[k] for k in asked}


@command("getCmdLineOpts")
async def _get_cmd_line_opts(cmds: Commands, req: Request) -> dict[str, Any]:
    _admin_only(req)
    node = cmds.node
    name, port = node.host.rsplit(":", 1)
    parsed: dict[str, Any] = {
        "net": {"bindIp": name, "port": int(port)},
        "setParameter": {"enableTestCommands": "1"},
        "security": {"authorization": "enabled" if node.requires_login else "disabled"},
    }
    argv = ["mongod", "--bind_ip", name, "--port", port]
    if not node.spec.standalone:
        parsed["replication"] = {"replSet": node.spec.set_name}
        argv += ["--replSet", node.spec.set_name]
    return {"argv": argv, "parsed": parsed}


@command("endSessions", "killSessions", "refreshSessions", "killAllSessions")
async def _sessions(cmds: Commands, req: Request) -> dict[str, Any]:
    """Sessions live on the client; ending or killing them aborts their transactions."""
    name = req.name.lower()
    if name == "killallsessions":
        cmds.transactions.end_sessions(None)
    elif name != "refreshsessions":
        cmds.transactions.end_sessions(list(req.body.get(req.name) or []))
    return {}


@command("commitTransaction")
async def _commit_transaction(cmds: Commands, req: Request) -> dict[str, Any]:
    return await cmds.transactions.commit(cmds, req)


@command("abortTransaction")
async def _abort_transaction(cmds: Commands, req: Request) -> dict[str, Any]:
    return await cmds.transactions.abort(cmds, req)


@command("serverStatus")
async def _server_status(cmds: Commands, req: Request) -> dict[str, Any]:
    node = cmds.node
    status = {
        "host": node.host,
        "version": claimed(node.spec).version,
        "process": "mongod",
        "pid": Int64(os.getpid()),
        "uptime": float(node.uptime_s()),
        "uptimeMillis": Int64(int((time.monotonic() - node.started_mono) * 1000)),
        "localTime": wallclock.now(),
        "connections": {"current": cmds.connections, "available": 50_000},
        "opcounters": {k: Int64(v) for k, v in cmds.opcounters.items()},
        "storageEngine": {
            "name": storage_engine(node.spec),
            "persistent": node.spec.storage != "memory",
        },
    }
    if not node.spec.standalone:
        status["repl"] = hello_reply(node, Request(req.db, "hello", {}, True, req.connection_id))
    return status


@command("shutdown")
async def _shutdown(cmds: Commands, req: Request) -> dict[str, Any]:
    if req.db != "admin":
        raise CommandError(13, "shutdown may only be run against the admin database")
    node = cmds.node
    if node.state is MemberState.PRIMARY and not req.body.get("force"):
        node.step_down(reason="shutdown", freeze_s=0)
    await node.shutdown()
    return {}


# -- CRUD -------------------------------------------------------------------------------------


@command("insert")
async def _insert(cmds: Commands, req: Request) -> dict[str, Any]:
    node = cmds.node
    ns = _ns(req)
    docs = req.body.get("documents") or []
    ordered = req.body.get("ordered", True)
    session = cmds.session_of(req)
    node.require_writable()
    _refuse_view(node, ns)
    n, errors, optime = 0, [], None
    for i, doc in enumerate(docs):
        cmds.opcounters["insert"] += 1
        stmt = _stmt_id(req, i)
        if cmds.done_before(session, stmt) is not None:
            n += 1
            continue
        if "_id" not in doc:
            doc = {"_id": ObjectId(), **doc}
        error = _insert_error(node, ns, doc, bool(req.body.get("bypassDocumentValidation")))
        if error is not None:
            errors.append({"index": i, **error})
            if ordered:
                break
            continue
        optime = node.write("i", ns, doc, session=cmds.session_fields(session, stmt, {"n": 1}))
        n += 1
    reply: dict[str, Any] = {"n": n}
    if errors:
        reply["writeErrors"] = errors
    return await cmds.finish_write(req, reply, optime)


def _stmt_id(req: Request, index: int) -> int:
    ids = req.body.get("stmtIds")
    return int(ids[index]) if ids else index


def _update_entry(
    old: dict[str, Any], new: dict[str, Any], update: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    """An update entry's `o` and `o2`, as mongod logs them: the diff from `old` to `new` (the
    document itself when the update replaced it) and the document's `_id`."""
    replacement = not (isinstance(update, list) or (update and next(iter(update)).startswith("$")))
    return updatediff.update_entry(old, new, replacement), {"_id": old["_id"]}


def _refuse_view(node: Node, ns: str) -> None:
    if node.store.view(ns) is not None:
        raise CommandError(166, f"Namespace {ns} is a view, not a collection")


def _insert_error(node: Node, ns: str, doc: dict[str, Any], bypass: bool) -> dict[str, Any] | None:
    """Why `doc` cannot be inserted (a write error's fields), or None."""
    doc_id = doc["_id"]
    if isinstance(doc_id, dict) and any(key.startswith("$") for key in doc_id):
        field = next(key for key in doc_id if key.startswith("$"))
        return {"code": 2, "errmsg": f"_id fields may not contain '$'-prefixed fields: {field} "
                                     "is not valid for storage."}  # fmt: skip
    if node.store.get(ns, doc_id) is not None:
        return {
            "code": 11000,
            "errmsg": f"E11000 duplicate key error collection: {ns} index: _id_ dup key: "
            f"{{ _id: {doc_id!r} }}",
            "keyPattern": {"_id": 1},
            "keyValue": {"_id": doc_id},
        }
    try:
        _check_document(node, ns, doc, bypass=bypass)
    except query.QueryError as exc:
        return {"code": exc.code, "errmsg": str(exc), **exc.details}
    return None


def _check_document(
    node: Node,
    ns: str,
    new: dict[str, Any],
    old: dict[str, Any] | None = None,
    *,
    bypass: bool = False,
) -> None:
    """A document about to be written (replacing `old`): the collection's validator, unless
    the command bypasses it, then its unique indexes; a QueryError if either refuses it."""
    if not bypass and (error := validation.failure(node.store.options(ns), new, old)):
        raise error
    _check_unique(node, ns, new)


def _check_unique(node: Node, ns: str, doc: dict[str, Any]) -> None:
    """DuplicateKey (a QueryError) if writing `doc` would break one of the unique indexes."""
    for keys in node.store.unique_keys(ns):
        if (error := keys.clash(doc, id_key(doc["_id"]))) is not None:
            raise error


def _write_error(index: int, exc: query.QueryError) -> dict[str, Any]:
    """A refused statement's entry in a write reply's `writeErrors`."""
    return {"index": index, "code": exc.code, "errmsg": str(exc)} | exc.details


@command("update")
async def _update(cmds: Commands, req: Request) -> dict[str, Any]:
    node = cmds.node
    ns = _ns(req)
    session = cmds.session_of(req)
    ordered = req.body.get("ordered", True)
    node.require_writable()
    _refuse_view(node, ns)
    variables = expressions.evaluate_let(req.body.get("let"))
    bypass = bool(req.body.get("bypassDocumentValidation"))
    if any(isinstance(spec, dict) and "sort" in spec for spec in req.body.get("updates") or []):
        # An update's sort came with MongoDB 8.0; 7.0 refuses the command as it parses it.
        raise CommandError(40415, "BSON field 'update.updates.sort' is an unknown field.")
    matched = modified = 0
    upserted: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    optime = None
    for i, spec in enumerate(req.body.get("updates") or []):
        cmds.opcounters["update"] += 1
        stmt = _stmt_id(req, i)
        previous = cmds.done_before(session, stmt)
        if previous is not None:
            matched += previous["n"] - (1 if "upserted" in previous else 0)
            modified += previous["nModified"]
            if "upserted" in previous:
                upserted.append({"index": i, "_id": previous["upserted"]})
            continue
        try:
            result, wrote = _update_one_spec(cmds, ns, spec, session, stmt, variables, bypass)
        except query.QueryError as exc:
            errors.append(_write_error(i, exc))
            if ordered:
                break
            continue
        optime = wrote or optime
        matched += result["n"] - (1 if "upserted" in result else 0)
        modified += result["nModified"]
        if "upserted" in result:
            upserted.append({"index": i, "_id": result["upserted"]})
    reply: dict[str, Any] = {"n": matched + len(upserted), "nModified": modified}
    if upserted:
        reply["upserted"] = upserted
    if errors:
        reply["writeErrors"] = errors
    return await cmds.finish_write(req, reply, optime)


def _update_one_spec(
    cmds: Commands,
    ns: str,
    spec: dict[str, Any],
    session: Any,
    stmt: int,
    variables: dict[str, Any],
    bypass: bool,
) -> tuple[dict[str, Any], OpTime | None]:
    node = cmds.node
    q, u = spec.get("q") or {}, spec.get("u") or {}
    array_filters = spec.get("arrayFilters")
    targets = _matching(node, ns, q, variables, spec.get("collation"))
    if not spec.get("multi"):
        targets = targets[:1]
    optime = None
    if not targets and spec.get("upsert"):
        doc = pipeline.update_document(
            query.upsert_seed(q),
            u,
            inserting=True,
            array_filters=array_filters,
            variables=variables,
        )
        if "_id" not in doc:
            doc = {"_id": ObjectId(), **doc}
        result = {"n": 1, "nModified": 0, "upserted": doc["_id"]}
        _check_document(node, ns, doc, bypass=bypass)
        optime = node.write("i", ns, doc, session=cmds.session_fields(session, stmt, result))
        return result, optime
    changed = 0
    for old in targets:
        new = pipeline.update_document(old, u, array_filters=array_filters, variables=variables)
        if new.get("_id") != old.get("_id"):
            raise query.QueryError(
                66, "Performing an update on the path '_id' would modify the immutable field '_id'"
            )
        if new != old or list(new) != list(old):
            _check_document(node, ns, new, old, bypass=bypass)
            changed += 1
            result = {"n": 1, "nModified": 1}
            o, o2 = _update_entry(old, new, u)
            optime = node.write(
                "u", ns, o, o2=o2, session=cmds.session_fields(session, stmt, result)
            )
    result = {"n": len(targets), "nModified": changed}
    if session is not None and changed == 0:
        # Nothing changed, but a retry must still find this statement done, on any member.
        optime = node.write(
            "n", "", {"msg": "retryable write"}, session=cmds.session_fields(session, stmt, result)
        )
    return result, optime


@command("findAndModify", "findandmodify")
async def _find_and_modify(cmds: Commands, req: Request) -> dict[str, Any]:
    """One document found (by query and sort), removed or updated, and returned as it was or
    (`new`) as it became; retryable like the other writes."""
    node = cmds.node
    body = req.body
    ns = _ns(req)
    session = cmds.session_of(req)
    node.require_writable()
    _refuse_view(node, ns)
    remove, update = bool(body.get("remove")), body.get("update")
    if remove == (update is not None):
        raise CommandError(9, "Either an update or remove=true must be specified")
    if remove and (body.get("new") or body.get("upsert")):
        raise CommandError(9, "Cannot specify new or upsert with remove=true")
    cmds.opcounters["delete" if remove else "update"] += 1
    previous = cmds.done_before(session, 0)
    if previous is not None:
        return await cmds.finish_write(req, dict(previous), None)
    q = body.get("query") or {}
    variables = expressions.evaluate_let(body.get("let"))
    array_filters = body.get("arrayFilters")
    bypass = bool(body.get("bypassDocumentValidation"))
    found = _matching(node, ns, q, variables, body.get("collation"), body.get("sort"))
    target = found[0] if found else None
    fields = body.get("fields")

    def shown(doc: dict[str, Any] | None) -> dict[str, Any] | None:
        return query.project(doc, fields) if doc is not None and fields else doc

    optime = None
    if remove:
        reply: dict[str, Any] = {"lastErrorObject": {"n": int(target is not None)},
                                 "value": shown(target)}  # fmt: skip
        if target is not None:
            optime = node.write("d", ns, {"_id": target["_id"]},
                                session=cmds.session_fields(session, 0, reply))  # fmt: skip
    elif target is None and body.get("upsert"):
        assert update is not None  # given unless remove, checked above
        doc = pipeline.update_document(
            query.upsert_seed(q),
            update,
            inserting=True,
            array_filters=array_filters,
            variables=variables,
        )
        if "_id" not in doc:
            doc = {"_id": ObjectId(), **doc}
        reply = {"lastErrorObject": {"n": 1, "updatedExisting": False, "upserted": doc["_id"]},
                 "value": shown(doc) if body.get("new") else None}  # fmt: skip
        _check_document(node, ns, doc, bypass=bypass)
        optime = node.write("i", ns, doc, session=cmds.session_fields(session, 0, reply))
    elif target is None:
        reply = {"lastErrorObject": {"n": 0, "updatedExisting": False}, "value": None}
    else:
        assert update is not None  # given unless remove, checked above
        new = pipeline.update_document(
            target, update, array_filters=array_filters, variables=variables
        )
        reply = {"lastErrorObject": {"n": 1, "updatedExisting": True},
                 "value": shown(new if body.get("new") else target)}  # fmt: skip
        if new != target or list(new) != list(target):
            _check_document(node, ns, new, target, bypass=bypass)
            o, o2 = _update_entry(target, new, update)
            optime = node.write("u", ns, o, o2=o2, session=cmds.session_fields(session, 0, reply))
    if optime is None and session is not None:
        # Nothing written, but a retry must find this statement done, on any member.
        optime = node.write("n", "", {"msg": "retryable write"},
                            session=cmds.session_fields(session, 0, reply))  # fmt: skip
    return await cmds.finish_write(req, reply, optime)


@command("distinct")
async def _distinct(cmds: Commands, req: Request) -> dict[str, Any]:
    cmds.check_readable(req)
    await cmds.majority_read_barrier(req)
    key = req.body.get("key")
    if not isinstance(key, str) or not key:
        raise CommandError(14, "distinct: key must be a string")
    docs = _matching(
        cmds.node, _ns(req), req.body.get("query") or {}, collation=req.body.get("collation")
    )
    return {"values": query.distinct_values(docs, key)}


@command("delete")
async def _delete(cmds: Commands, req: Request) -> dict[str, Any]:
    node = cmds.node
    ns = _ns(req)
    session = cmds.session_of(req)
    node.require_writable()
    _refuse_view(node, ns)
    n, optime = 0, None
    ordered = req.body.get("ordered", True)
    errors: list[dict[str, Any]] = []
    variables = expressions.evaluate_let(req.body.get("let"))
    for i, spec in enumerate(req.body.get("deletes") or []):
        cmds.opcounters["delete"] += 1
        stmt = _stmt_id(req, i)
        previous = cmds.done_before(session, stmt)
        if previous is not None:
            n += previous["n"]
            continue
        try:
            targets = _matching(node, ns, spec.get("q") or {}, variables, spec.get("collation"))
        except query.QueryError as exc:  # a statement's error, as update's: the reply is ok
            errors.append(_write_error(i, exc))
            if ordered:
                break
            continue
        if spec.get("limit", 0) == 1:
            targets = targets[:1]
        for doc in targets:
            optime = node.write(
                "d", ns, {"_id": doc["_id"]}, session=cmds.session_fields(session, stmt, {"n": 1})
            )
        if session is not None and not targets:
            optime = node.write(
                "n",
                "",
                {"msg": "retryable write"},
                session=cmds.session_fields(session, stmt, {"n": 0}),
            )
        n += len(targets)
    reply: dict[str, Any] = {"n": n}
    if errors:
        reply["writeErrors"] = errors
    return await cmds.finish_write(req, reply, optime)


def _matching(
    node: Node,
    ns: str,
    filt: dict[str, Any],
    variables: dict[str, Any] | None = None,
    collation: Any = None,
    sort: Any = None,
) -> list[dict[str, Any]]:
    """Documents matching a filter (then sorted by `sort`), compared under `collation`; an
    `_id` equality looks the document up instead of scanning. `variables`: the command's
    `let`, for `$expr`."""
    with values.collation(collation):
        found = _scan(node, ns, query.compile_filter(filt, variables), filt)
        return query.sort_documents(found, sort) if sort else found


def _collection(node: Node, ns: str) -> list[dict[str, Any]]:
    """A collection's documents, or what a view's pipeline makes of its source's."""
    view = node.store.view(ns)
    if view is None:
        return node.store.documents(ns)
    source = f"{ns.split('.', 1)[0]}.{view['viewOn']}"
    return pipeline.run_pipeline(_collection(node, source), view["pipeline"])


def _scan(
    node: Node, ns: str, predicate: query.Predicate, filt: dict[str, Any]
) -> list[dict[str, Any]]:
    if node.store.view(ns) is not None:
        return [d for d in _collection(node, ns) if predicate(d)]
    doc_id = filt.get("_id")
    if "_id" in filt and not isinstance(doc_id, dict | list):
        found = node.store.get(ns, doc_id)
        return [found] if found is not None and predicate(found) else []
    return [d for d in node.store.documents(ns) if predicate(d)]


def _oplog_documents(node: Node, body: dict[str, Any]) -> list[dict[str, Any]]:
    """`local.oplog.rs` in natural (oplog) order, newest first with sort `{$natural: -1}`.

    Only `$natural` orders it. Tools read its first and last entries this way (the oplog
    window of `db.getReplicationInfo()`); reading one end touches only that entry.
    """
    sort = dict(body.get("sort") or {})
    if set(sort) - {"$natural"} or sort.get("$natural", 1) not in (1, -1):
        raise CommandError(2, f"the sandbox sorts {OPLOG_NS} only by $natural (1 or -1)")
    newest_first = sort.get("$natural", 1) == -1
    oplog = node.oplog
    filt = body.get("filter") or {}
    if not filt and not body.get("skip") and abs(int(body.get("limit") or 0)) == 1:
        entry = oplog.newest_entry() if newest_first else oplog.entry_at(oplog.oldest)
        return [] if entry is None else [entry]
    predicate = query.compile_filter(filt)
    docs = [e for e in oplog.entries_after(NULL_OPTIME, max_bytes=1 << 62) if predicate(e)]
    return docs[::-1] if newest_first else docs


def _filtered(cmds: Commands, req: Request, ns: str) -> list[dict[str, Any]]:
    filt = req.body.get("filter") or {}
    if ns == OPLOG_NS:
        docs = _oplog_documents(cmds.node, req.body)
    else:
        variables = expressions.evaluate_let(req.body.get("let"))
        docs = _matching(cmds.node, ns, filt, variables, req.body.get("collation"),
                         req.body.get("sort"))  # fmt: skip
    skip = int(req.body.get("skip") or 0)
    limit = abs(int(req.body.get("limit") or 0))
    docs = docs[skip:]
    if limit:
        docs = docs[:limit]
    projection = req.body.get("projection")
    if projection:
        docs = [query.project(d, projection) for d in docs]
    return docs


@command("find")
async def _find(cmds: Commands, req: Request) -> dict[str, Any]:
    cmds.check_readable(req)
    await cmds.majority_read_barrier(req)
    cmds.opcounters["query"] += 1
    ns = _ns(req)
    docs = _filtered(cmds, req, ns)
    if req.body.get("returnKey"):
        index = _index_used(cmds.node, ns, req.body)
        docs = [(indexes.key_value(index, d) or {}) if index else {} for d in docs]
    batch = req.body.get("batchSize")
    single = bool(req.body.get("singleBatch")) or int(req.body.get("limit") or 0) < 0
    return cmds.open_cursor(ns, docs, int(batch) if batch is not None else None, single)


def _index_used(node: Node, ns: str, body: dict[str, Any]) -> dict[str, Any] | None:
    """The index a find would read, for `returnKey` (None: a collection scan, whose documents
    have no key): the hinted one, else the first whose leading field the filter names, else
    one whose fields lead with the sort's."""
    candidates = [{"key": {"_id": 1}, "name": "_id_"}, *node.store.indexes(ns)]
    hint = body.get("hint")
    if hint:
        return next((i for i in candidates if hint in (i["name"], i["key"])), None)
    filt, sort = body.get("filter") or {}, list(body.get("sort") or {})
    for index in candidates:
        if next(iter(index["key"])) in filt:
            return index
    for index in candidates:
        if sort and list(index["key"])[: len(sort)] == sort:
            return index
    return None


@command("collStats")
async def _coll_stats(cmds: Commands, req: Request) -> dict[str, Any]:
    """Only for the oplog: its size against its cap (the other half of the oplog window)."""
    ns = _ns(req)
    if ns != OPLOG_NS:
        raise CommandError(115, f"the sandbox answers collStats only for {OPLOG_NS}")
    oplog = cmds.node.oplog
    return {
        "ns": ns,
        "count": len(oplog),
        "size": Int64(oplog.size_bytes),
        "capped": True,
        "maxSize": Int64(oplog.capacity_bytes),
    }


@command("count")
async def _count(cmds: Commands, req: Request) -> dict[str, Any]:
    cmds.check_readable(req)
    await cmds.majority_read_barrier(req)
    ns = _ns(req)
    body = {**req.body, "filter": req.body.get("query") or {}}
    return {"n": len(_filtered(cmds, Request(req.db, "count", body, True, 0), ns))}


@command("aggregate")
async def _aggregate(cmds: Commands, req: Request) -> dict[str, Any]:
    """A collection's pipeline, or a database's (`aggregate: 1`, starting with a source stage
    such as `$documents` or `$listLocalSessions`); a final `$out` / `$merge` writes the results
    and the cursor is empty."""
    cmds.check_readable(req)
    await cmds.majority_read_barrier(req)
    raw = req.body.get("pipeline")
    if not isinstance(raw, list):
        raise CommandError(14, "'pipeline' option must be specified as an array")
    stages = pipeline.parse_pipeline(raw)
    variables = expressions.evaluate_let(req.body.get("let"))
    source = pipeline.source_stage(raw)
    on_database = req.body.get("aggregate") == 1 and not isinstance(req.body["aggregate"], bool)
    if on_database and source is None:
        raise CommandError(73, "{aggregate: 1} is not valid for the first stage; a collection "
                               "is required.")  # fmt: skip
    ns = f"{req.db}.$cmd.aggregate" if on_database else _ns(req)
    batch = (req.body.get("cursor") or {}).get("batchSize")
    if source is not None and source[0] == "$changeStream":
        return _open_change_stream(cmds, req, ns, source[1], raw[1:], batch)
    output = stages[-1] if stages and stages[-1][0] in pipeline.OUTPUT_STAGES else None
    if output and (req.body.get("readConcern") or {}).get("level") == "linearizable":
        raise CommandError(72, f"{output[0]} cannot be used with a 'linearizable' read concern")
    middle = raw[1 if source else 0 : len(raw) - (1 if output else 0)]
    count = None if source or cmds.node.store.view(ns) else _whole_collection_count(middle)
    if source is not None:
        docs = pipeline.run_pipeline(_source_documents(cmds, req, *source, variables), middle,
                                     variables)  # fmt: skip
    elif count is not None:
        # count_documents({}) on a big collection: count rows instead of decoding them all.
        total = cmds.node.store.count(ns)
        docs = [{"_id": count[0], count[1]: total}] if total else []
    else:
        docs = pipeline.run_pipeline(_collection(cmds.node, ns), middle, variables)
    if output is None:
        return cmds.open_cursor(ns, docs, int(batch) if batch is not None else None)
    target = pipeline.output_target(*output, req.db)
    node = cmds.node
    if node.state is MemberState.SECONDARY and node.primary_host:
        # As mongod 5.0+: a secondary runs the pipeline, the primary writes its results.
        forwarded_stages = [{"$documents": {"$literal": docs}}, {output[0]: output[1]}]
        forwarded: dict[str, Any] = {"aggregate": 1, "pipeline": forwarded_stages, "cursor": {}}
        if "writeConcern" in req.body:
            forwarded["writeConcern"] = req.body["writeConcern"]
        try:
            reply = await node.peer_calls.call(
                node.primary_host, forwarded, purpose="aggregate", timeout=30, db=req.db
            )
        except PeerError as exc:
            raise CommandError(10107, f"could not reach the primary to write: {exc}") from None
        if reply.get("ok") != 1:
            return {k: v for k, v in reply.items() if k not in ("$clusterTime", "operationTime")}
        return cmds.open_cursor(ns, [], None)
    node.require_writable()
    optime = _write_output(cmds, target, docs)
    return await cmds.finish_write(req, cmds.open_cursor(ns, [], None), optime)


def _open_change_stream(
    cmds: Commands, req: Request, ns: str, spec: Any, rest: list[Any], batch: Any
) -> dict[str, Any]:
    node = cmds.node
    target = req.body["aggregate"]
    level = (req.body.get("readConcern") or {}).get("level")
    if level not in (None, "majority"):
        # A stream reads majority-committed entries only; mongod refuses any other promise.
        raise CommandError(72, f"$changeStream does not support read concern {level!r}: "
                               "only 'majority' (the default)")  # fmt: skip
    stream = changestream.open_stream(node, req.db, target, spec, rest, ns)
    cursor_id = random.randint(1, 2**62)
    cmds.cursors[cursor_id] = stream
    size = int(batch) if batch is not None else None
    return changestream.reply(cursor_id, stream, changestream.first_batch(node, stream, size), True)


def _source_documents(
    cmds: Commands, req: Request, name: str, spec: Any, variables: dict[str, Any]
) -> list[dict[str, Any]]:
    if name == "$documents":
        return pipeline.documents_stage(spec, variables)
    if name == "$listLocalSessions":
        # The sandbox keeps no session cache: the session this command runs in is the one known.
        lsid = req.body.get("lsid")
        return [] if lsid is None else [{"_id": lsid, "lastUse": wallclock.now()}]
    _admin_only(req)  # $currentOp: every request the member is answering now, this one too
    return [_current_op(op_id, r) for op_id, r in cmds.in_progress.items()]


# $currentOp's `op` of the commands mongod names apart (every other one is "command").
_OP_KINDS = {"insert": "insert", "update": "update", "delete": "remove", "getmore": "getmore"}
# Commands whose body carries a login's secrets: $currentOp shows their name only.
_SECRET_COMMANDS = frozenset({"saslstart", "saslcontinue", "authenticate", "createuser",
                              "updateuser"})  # fmt: skip


def _current_op(op_id: int, req: Request) -> dict[str, Any]:
    """A request in progress as mongod's $currentOp shows it (no lock or timing fields)."""
    name = req.name.lower()
    target = req.body.get("collection" if name == "getmore" else req.name)
    ns = f"{req.db}.{target}" if isinstance(target, str) and target else f"{req.db}.$cmd"
    body = {req.name: 1} if name in _SECRET_COMMANDS else req.body
    return {"type": "op", "active": True, "opid": op_id, "connectionId": req.connection_id,
            "op": _OP_KINDS.get(name, "command"), "ns": ns, "command": body}  # fmt: skip


def _write_output(
    cmds: Commands, target: pipeline.OutputTarget, docs: list[dict[str, Any]]
) -> OpTime | None:
    """Write an aggregation's results as `$out` (the collection becomes them) or `$merge`."""
    node = cmds.node
    ns = f"{target.db}.{target.coll}"
    optime = None
    if target.replace_all:
        docs = [doc if "_id" in doc else {"_id": ObjectId(), **doc} for doc in docs]
        if node.store.exists(ns):
            optime = node.write("c", f"{target.db}.$cmd", {"drop": target.coll})
        optime = node.write("c", f"{target.db}.$cmd", {"create": target.coll})
        for doc in docs:
            optime = node.write("i", ns, doc)
        return optime
    for doc in pipeline.merged_documents(target, docs, lambda doc_id: node.store.get(ns, doc_id)):
        _check_unique(node, ns, doc)
        optime = node.write("i", ns, doc)
    return optime


def _whole_collection_count(pipeline: list[Any]) -> tuple[Any, str] | None:
    """(group _id, output field) when the pipeline is `[{$match: {}}, {$group: {_id: c,
    <field>: {$sum: 1}}}]`, pymongo's count_documents({}); None otherwise."""
    if len(pipeline) != 2 or pipeline[0] != {"$match": {}}:
        return None
    group = pipeline[1].get("$group") if isinstance(pipeline[1], dict) else None
    if not isinstance(group, dict) or len(group) != 2 or isinstance(group.get("_id"), dict | str):
        return None
    ((field, accumulator),) = ((k, v) for k, v in group.items() if k != "_id")
    if accumulator != {"$sum": 1}:
        return None
    return group["_id"], field


@command("getMore")
async def _get_more(cmds: Commands, req: Request) -> dict[str, Any]:
    cmds.opcounters["getmore"] += 1
    cursor_id = int(req.body.get("getMore") or 0)
    cursor = cmds.cursors.get(cursor_id)
    if cursor is None:
        raise CommandError(43, f"cursor id {cursor_id} not found")
    fail = cmds.fail_points.get(AFTER_CURSOR_CHECKOUT)
    app = cmds.app_names.get(req.connection_id)
    if fail is not None and fail.fires_for(req.name, req.body, app):
        del cmds.cursors[cursor_id]  # as on mongod: a getMore that fails kills its cursor
        if fail.close_connection:
            raise CloseConnection
        raise CommandError(int(fail.error_code or 96),
                           f"Failing command via '{AFTER_CURSOR_CHECKOUT}' failpoint")  # fmt: skip
    batch_size = req.body.get("batchSize")
    if isinstance(cursor, changestream.ChangeStreamCursor):
        size = int(batch_size) if batch_size else None
        events = await changestream.next_batch(cmds.node, cursor, size, req.body.get("maxTimeMS"))
        reply = changestream.reply(cursor_id, cursor, events, False)
        if reply["cursor"]["id"] == 0:
            del cmds.cursors[cursor_id]
        return reply
    batch = cmds._next_batch(cursor, int(batch_size) if batch_size else None)
    if cursor.position >= len(cursor.docs):
        del cmds.cursors[cursor_id]
        cursor_id = 0
    return {"cursor": {"nextBatch": batch, "id": Int64(cursor_id), "ns": cursor.ns}}


@command("killCursors")
async def _kill_cursors(cmds: Commands, req: Request) -> dict[str, Any]:
    killed: list[Int64] = []
    missing: list[Int64] = []
    for cid in req.body.get("cursors") or []:
        (killed if cmds.cursors.pop(int(cid), None) else missing).append(Int64(int(cid)))
    return {
        "cursorsKilled": killed,
        "cursorsNotFound": missing,
        "cursorsAlive": [],
        "cursorsUnknown": [],
    }


# -- catalog ----------------------------------------------------------------------------------


@command("listDatabases")
async def _list_databases(cmds: Commands, req: Request) -> dict[str, Any]:
    store = cmds.node.store
    dbs = [{"name": db, "sizeOnDisk": 0.0, "empty": False} for db in store.databases()]
    if req.body.get("nameOnly"):
        dbs = [{"name": d["name"]} for d in dbs]
    return {"databases": dbs, "totalSize": 0.0}


@command("listCollections")
async def _list_collections(cmds: Commands, req: Request) -> dict[str, Any]:
    prefix = req.db + "."
    names = [ns[len(prefix) :] for ns in cmds.node.store.namespaces() if ns.startswith(prefix)]
    infos = [_collection_info(cmds.node, req.db, n) for n in names]
    filt = req.body.get("filter") or {}
    infos = [i for i in infos if query.matches(i, filt)]
    if req.body.get("nameOnly"):
        infos = [{"name": i["name"], "type": i["type"]} for i in infos]
    return cmds.open_cursor(f"{req.db}.$cmd.listCollections", infos, None)


def _collection_info(node: Node, db: str, name: str) -> dict[str, Any]:
    view = node.store.view(f"{db}.{name}")
    if view is not None:
        return {"name": name, "type": "view", "options": view, "info": {"readOnly": True}}
    return {
        "name": name,
        "type": "collection",
        "options": dict(node.store.options(f"{db}.{name}")),
        "info": {"readOnly": False},
        "idIndex": {"v": 2, "key": {"_id": 1}, "name": "_id_"},
    }


@command("listIndexes")
async def _list_indexes(cmds: Commands, req: Request) -> dict[str, Any]:
    ns = _ns(req)
    if not cmds.node.store.exists(ns):
        raise CommandError(26, f"ns does not exist: {ns}")
    specs = [indexes.ID_INDEX, *cmds.node.store.indexes(ns)]
    batch = (req.body.get("cursor") or {}).get("batchSize")
    return cmds.open_cursor(ns, specs, int(batch) if batch is not None else None)


@command("create")
async def _create(cmds: Commands, req: Request) -> dict[str, Any]:
    ns = _ns(req)
    cmds.node.require_writable()
    if cmds.node.store.exists(ns):
        raise CommandError(48, f"Collection {ns} already exists.")
    o: dict[str, Any] = {"create": req.body["create"]}
    if "viewOn" in req.body:
        view_on, stages = req.body["viewOn"], req.body.get("pipeline", [])
        if not isinstance(view_on, str) or not view_on:
            raise CommandError(2, "'viewOn' must be a non-empty string")
        for name, _ in pipeline.parse_pipeline(stages):
            if name in pipeline.OUTPUT_STAGES or name == "$changeStream":
                raise CommandError(2, f"{name} cannot be used in a view definition")
        o |= {"viewOn": view_on, "pipeline": stages}
    if "changeStreamPreAndPostImages" in req.body:
        o["changeStreamPreAndPostImages"] = _pre_and_post_images(req.body)
    o |= validation.options_of(req.body)
    optime = cmds.node.write("c", f"{req.db}.$cmd", o)
    return await cmds.finish_write(req, {}, optime)


def _pre_and_post_images(body: dict[str, Any]) -> dict[str, bool]:
    setting = body["changeStreamPreAndPostImages"]
    if (
        not isinstance(setting, dict)
        or set(setting) != {"enabled"}
        or not isinstance(setting["enabled"], bool)
    ):
        raise CommandError(2, "changeStreamPreAndPostImages must be {enabled: true|false}")
    return {"enabled": setting["enabled"]}


@command("collMod")
async def _coll_mod(cmds: Commands, req: Request) -> dict[str, Any]:
    """collMod's changeStreamPreAndPostImages and validation options; other options are
    refused by name, not ignored."""
    ns = _ns(req)
    node = cmds.node
    node.require_writable()
    if not node.store.exists(ns) or node.store.view(ns) is not None:
        raise CommandError(26, f"ns does not exist: {ns}")
    known = {"collMod", "changeStreamPreAndPostImages", *validation.OPTIONS}
    unknown = sorted(set(req.body) - known - _GENERIC_FIELDS)
    if unknown:
        raise CommandError(72, f"collMod option {unknown[0]!r} is not supported by the sandbox")
    o: dict[str, Any] = {"collMod": req.body["collMod"]}
    if "changeStreamPreAndPostImages" in req.body:
        o["changeStreamPreAndPostImages"] = _pre_and_post_images(req.body)
    o |= validation.options_of(req.body)
    optime = node.write("c", f"{req.db}.$cmd", o)
    return await cmds.finish_write(req, {}, optime)


@command("drop")
async def _drop(cmds: Commands, req: Request) -> dict[str, Any]:
    ns = _ns(req)
    cmds.node.require_writable()
    if not cmds.node.store.exists(ns):
        return {"ns": ns}
    was = 1 + len(cmds.node.store.indexes(ns))
    optime = cmds.node.write("c", f"{req.db}.$cmd", {"drop": req.body["drop"]})
    return await cmds.finish_write(req, {"ns": ns, "nIndexesWas": was}, optime)


@command("renameCollection")
async def _rename_collection(cmds: Commands, req: Request) -> dict[str, Any]:
    """renameCollection (admin): `renameCollection: "db.from", to: "db.to"`, `dropTarget`."""
    _admin_only(req)
    node = cmds.node
    node.require_writable()
    names: list[str] = []
    for name in ("renameCollection", "to"):
        value = req.body.get(name)
        if not isinstance(value, str) or "." not in value.strip(".") or value.endswith("."):
            raise CommandError(73, f"Invalid {name} namespace: {value!r}")
        names.append(value)
    source, target = names
    if source == target:
        raise CommandError(20, "Can't rename a collection to itself")
    if not node.store.exists(source):
        raise CommandError(26, f"Source collection {source} does not exist")
    _refuse_view(node, source)
    drop_target = bool(req.body.get("dropTarget"))
    if node.store.exists(target):
        if not drop_target:
            raise CommandError(48, "target namespace exists")
        _refuse_view(node, target)
    source_db = source.split(".", 1)[0]
    o = {"renameCollection": source, "to": target, "stayTemp": False, "dropTarget": drop_target}
    optime = node.write("c", f"{source_db}.$cmd", o)
    return await cmds.finish_write(req, {}, optime)


@command("dropDatabase")
async def _drop_database(cmds: Commands, req: Request) -> dict[str, Any]:
    node = cmds.node
    node.require_writable()
    # As mongod (4.2+): each collection's drop is an entry of its own (so streams see a drop
    # event per collection), then the database's, which takes the views with it.
    prefix = f"{req.db}."
    for ns in node.store.namespaces():
        name = ns[len(prefix) :]
        if ns.startswith(prefix) and not name.startswith("system.") and not node.store.view(ns):
            node.write("c", f"{req.db}.$cmd", {"drop": name})
    optime = node.write("c", f"{req.db}.$cmd", {"dropDatabase": 1})
    return await cmds.finish_write(req, {"dropped": req.db}, optime)


@command("createIndexes")
async def _create_indexes(cmds: Commands, req: Request) -> dict[str, Any]:
    """Record each new index (replicated as mongod logs it); a unique one is built, that is
    checked against the documents already there."""
    ns = _ns(req)
    node = cmds.node
    node.require_writable()
    _refuse_view(node, ns)
    specs = req.body.get("indexes")
    if not isinstance(specs, list) or not specs:
        raise CommandError(2, "Must specify at least one index to create")
    parsed = [indexes.parse_spec(spec) for spec in specs]
    created = not node.store.exists(ns)
    optime = None
    if created:
        optime = node.write("c", f"{req.db}.$cmd", {"create": req.body["createIndexes"]})
    before = 1 + len(node.store.indexes(ns))
    for spec in parsed:
        if spec["name"] == "_id_" or dict(spec["key"]) == {"_id": 1}:
            continue
        existing = next((i for i in node.store.indexes(ns) if i["name"] == spec["name"]), None)
        if existing is not None and indexes.same_index(existing, spec):
            continue
        if existing is not None:
            raise CommandError(86, f"An existing index has the same name as the requested "
                                   f"index but different options: {spec['name']}")  # fmt: skip
        if any(indexes.same_index(i, spec) for i in node.store.indexes(ns)):
            raise CommandError(85, f"Index already exists with a different name: {spec['name']}")
        indexes.build_check(ns, spec, node.store.documents(ns), id_key)
        optime = node.write("c", f"{req.db}.$cmd", {"createIndexes": req.body["createIndexes"],
                                                    **spec})  # fmt: skip
    reply: dict[str, Any] = {
        "createdCollectionAutomatically": created,
        "numIndexesBefore": before,
        "numIndexesAfter": 1 + len(node.store.indexes(ns)),
    }
    if reply["numIndexesAfter"] == before:
        reply["note"] = "all indexes already exist"
    return await cmds.finish_write(req, reply, optime)


@command("dropIndexes", "deleteIndexes")
async def _drop_indexes(cmds: Commands, req: Request) -> dict[str, Any]:
    """Drop one index (by name or key pattern), several (a list of names) or all (`*`)."""
    ns = _ns(req)
    node = cmds.node
    node.require_writable()
    if not node.store.exists(ns):
        raise CommandError(26, f"ns not found {ns}")
    which = req.body.get("index")
    current = node.store.indexes(ns)
    if which == "*":
        names = [i["name"] for i in current]
    elif isinstance(which, dict):
        names = [i["name"] for i in current if dict(i["key"]) == dict(which)]
        if not names:
            raise CommandError(27, f"can't find index with key: {which}")
    elif isinstance(which, str | list):
        names = [which] if isinstance(which, str) else list(which)
        known = {i["name"] for i in current}
        if "_id_" in names:
            raise CommandError(72, "cannot drop _id index")
        missing = [name for name in names if name not in known]
        if missing:
            raise CommandError(27, f"index not found with name [{missing[0]}]")
    else:
        raise CommandError(14, "dropIndexes 'index' must be a string, an object or an array")
    was = 1 + len(current)
    optime = None
    for name in names:
        optime = node.write("c", f"{req.db}.$cmd", {"dropIndexes": req.body["dropIndexes"],
                                                    "index": name})  # fmt: skip
    return await cmds.finish_write(req, {"nIndexesWas": was}, optime)


# -- replication ------------------------------------------------------------------------------


def _admin_only(req: Request) -> None:
    if req.db != "admin":
        raise CommandError(13, f"{req.name} may only be run against the admin database")


@command("configureFailPoint")
async def _configure_fail_point(cmds: Commands, req: Request) -> dict[str, Any]:
    _admin_only(req)
    name = str(req.body.get("configureFailPoint"))
    fail_point = FailPoint.from_command(req.body)
    if fail_point is None:
        cmds.fail_points.pop(name, None)
    else:
        cmds.fail_points[name] = fail_point
    if name == STOP_REPLICATION:
        cmds.node.replication_stopped = fail_point is not None
    return {"count": 0}


@command("rsdrillClockSkew")
async def _clock_skew(cmds: Commands, req: Request) -> dict[str, Any]:
    """rsdrill's clock-skew fault: this member's wall clock moved (see wallclock.py)."""
    _admin_only(req)
    offset, drift = req.body.get("rsdrillClockSkew"), req.body.get("drift", 0)
    if not (_number(offset) and _number(drift)):
        raise CommandError(2, "rsdrillClockSkew takes the offset in seconds and a numeric drift")
    wallclock.set_skew(float(offset), float(drift))
    cmds.node.events.emit("clock_skew", offset_s=float(offset), drift=float(drift))
    return {"skewSeconds": wallclock.skew_s()}


def _number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


@command("replSetGetStatus")
async def _repl_status(cmds: Commands, req: Request) -> dict[str, Any]:
    _admin_only(req)
    return replset_status(cmds.node)


def _optime_fields(prefix: str, optime: OpTime, wall: dt.datetime | None) -> dict[str, Any]:
    return {
        prefix: optime.document(),
        f"{prefix}Date": optime.date(),
        f"last{prefix[0].upper()}{prefix[1:]}WallTime": wall,
    }


def replset_status(node: Node) -> dict[str, Any]:
    """replSetGetStatus as MongoDB shapes it (what the recovery probe polls)."""
    now = wallclock.now()
    members = []
    for m in node.spec.members:
        state = node.member_state_of(m.host)
        entry: dict[str, Any] = {"_id": m.id, "name": m.host}
        if m.host == node.host:
            entry.update(
                health=1.0,
                state=int(state),
                stateStr=state.label,
                uptime=node.uptime_s(),
            )
            if not m.arbiter_only:
                entry.update(
                    optime=node.last_applied.document(),
                    optimeDate=node.last_applied.date(),
                    optimeDurable=node.last_durable.document(),
                    optimeDurableDate=node.last_durable.date(),
                    lastAppliedWallTime=node.last_applied_wall,
                    lastDurableWallTime=node.last_applied_wall,
                    syncSourceHost=node.sync_source,
                )
            entry.update(
                infoMessage=node.info_message,
                configVersion=1,
                configTerm=node.term,
                self=True,
                lastHeartbeatMessage="",
            )
            if state is MemberState.PRIMARY and node.election_time:
                entry["electionTime"] = node.election_time.timestamp
                entry["electionDate"] = node.election_time.date()
        else:
            peer = node.peers[m.host]
            entry.update(
                health=float(peer.health), state=int(state), stateStr=state.label, uptime=0
            )
            if not m.arbiter_only:
                entry.update(
                    optime=peer.applied.document(),
                    optimeDurable=peer.durable.document(),
                    optimeDate=peer.applied.date(),
                    optimeDurableDate=peer.durable.date(),
                    lastAppliedWallTime=peer.applied_wall,
                    lastDurableWallTime=peer.durable_wall,
                    syncSourceHost=peer.sync_source,
                )
            entry.update(
                lastHeartbeat=peer.last_heartbeat,
                lastHeartbeatRecv=peer.last_heartbeat_recv,
                pingMs=Int64(peer.ping_ms),
                lastHeartbeatMessage=peer.message,
                configVersion=1,
                configTerm=peer.term,
            )
            if state is MemberState.PRIMARY and peer.election_time:
                entry["electionTime"] = peer.election_time.timestamp
                entry["electionDate"] = peer.election_time.date()
        members.append(entry)
    reply: dict[str, Any] = {
        "set": node.spec.set_name,
        "date": now,
        "myState": int(node.state),
        "term": Int64(node.term),
        "syncSourceHost": node.sync_source,
        "heartbeatIntervalMillis": Int64(node.spec.settings.heartbeat_interval_ms),
        "majorityVoteCount": node.spec.majority,
        "writeMajorityCount": node.spec.write_majority,
        "votingMembersCount": len(node.spec.voting),
        "writableVotingMembersCount": sum(1 for m in node.spec.voting if not m.arbiter_only),
        "optimes": {
            "lastCommittedOpTime": node.commit_point.document(),
            "lastCommittedWallTime": node.commit_point.date(),
            "readConcernMajorityOpTime": node.commit_point.document(),
            "appliedOpTime": node.last_applied.document(),
            "durableOpTime": node.last_durable.document(),
            "lastAppliedWallTime": node.last_applied_wall,
            "lastDurableWallTime": node.last_applied_wall,
        },
        "members": members,
    }
    if node.state is MemberState.PRIMARY and node.election_metrics:
        reply["electionCandidateMetrics"] = dict(node.election_metrics)
    if node.initial_sync_status is not None:
        reply["initialSyncStatus"] = dict(node.initial_sync_status)
    if node.too_stale:  # as mongod 4.2+ (SERVER-29803): RECOVERING and unable to catch up
        reply["tooStale"] = True
    return reply


@command("replSetGetConfig")
async def _repl_config(cmds: Commands, req: Request) -> dict[str, Any]:
    _admin_only(req)
    spec = cmds.node.spec
    s = spec.settings
    return {
        "config": {
            "_id": spec.set_name,
            "version": 1,
            "term": Int64(cmds.node.term),
            "protocolVersion": Int64(1),
            "writeConcernMajorityJournalDefault": True,
            "members": [
                {
                    "_id": m.id,
                    "host": m.host,
                    "arbiterOnly": m.arbiter_only,
                    "buildIndexes": True,
                    "hidden": False,
                    "priority": m.priority,
                    "tags": {},
                    "secondaryDelaySecs": Int64(0),
                    "votes": m.votes,
                }
                for m in spec.members
            ],
            "settings": {
                "chainingAllowed": s.chaining_allowed,
                "heartbeatIntervalMillis": s.heartbeat_interval_ms,
                "heartbeatTimeoutSecs": s.heartbeat_timeout_s,
                "electionTimeoutMillis": s.election_timeout_ms,
                "catchUpTimeoutMillis": s.catch_up_timeout_ms,
                "catchUpTakeoverDelayMillis": 30000,
                "getLastErrorModes": {},
                "getLastErrorDefaults": {"w": 1, "wtimeout": 0},
            },
        }
    }


@command("replSetStepDown")
async def _step_down(cmds: Commands, req: Request) -> dict[str, Any]:
    """Wait for an electable secondary to catch up, step down, hand the election off to it."""
    _admin_only(req)
    node = cmds.node
    if node.state is not MemberState.PRIMARY:
        raise CommandError(10107, "not primary so can't step down")
    secs = float(req.body.get("replSetStepDown") or 60)
    force = bool(req.body.get("force"))
    # As mongod: forced, it waits for no secondary unless told to (default 0 s, else 10 s).
    catch_up = float(req.body.get("secondaryCatchUpPeriodSecs", 0 if force else 10))
    if catch_up > secs:
        raise CommandError(2, "stepdown period must be longer than secondaryCatchUpPeriodSecs")
    node.writable = False  # no new writes while the secondaries catch up
    node.bump_topology()
    deadline = time.monotonic() + catch_up
    target = node.last_applied
    heir = None
    while True:
        caught = [
            p
            for p in node.peers.values()
            if p.health
            and p.spec.priority > 0
            and not p.spec.arbiter_only
            and p.state is MemberState.SECONDARY
            and p.applied >= target
        ]
        if caught:
            heir = max(caught, key=lambda p: p.spec.priority).spec.host
            break
        if time.monotonic() >= deadline or node.state is not MemberState.PRIMARY:
            break
        await node.progress.wait(deadline - time.monotonic())
    if heir is None and not force:
        if node.state is MemberState.PRIMARY:
            node.writable = True
            node.bump_topology()
        raise CommandError(
            262,
            "No electable secondaries caught up as of "
            f"{wallclock.now().isoformat()}. Please use the replSetStepDown "
            "command with the argument {force: true} to force node to step down.",
        )
    node.step_down(reason="replSetStepDown", freeze_s=secs)
    if heir is not None:
        try:
            await node.peer_calls.call(
                heir, {"replSetStepUp": 1, "skipDryRun": True}, purpose="handoff", timeout=1.0
            )
            node.events.emit("election_handoff", to=heir)
        except Exception:  # the heir will still win by timeout; the hand-off only speeds it up
            pass
    return {}


@command("replSetStepUp")
async def _step_up(cmds: Commands, req: Request) -> dict[str, Any]:
    _admin_only(req)
    node = cmds.node
    if node.state is MemberState.PRIMARY:
        return {}
    if not node.is_electable():
        raise CommandError(95, f"cannot step up from state {node.state.name}")
    won = await election.run_election(
        node, reason="stepUpRequest", skip_dry_run=bool(req.body.get("skipDryRun"))
    )
    if not won:
        raise CommandError(125, "Election failed.")
    return {}


@command("replSetFreeze")
async def _freeze(cmds: Commands, req: Request) -> dict[str, Any]:
    _admin_only(req)
    node = cmds.node
    if node.state is MemberState.PRIMARY:
        raise CommandError(95, "cannot freeze node when primary or running for election")
    secs = float(req.body.get("replSetFreeze") or 0)
    node.frozen_until = time.monotonic() + secs if secs else 0.0
    node.events.emit("freeze", seconds=secs)
    return {"info": "unfreezing"} if not secs else {}


@command("replSetHeartbeat")
async def _heartbeat(cmds: Commands, req: Request) -> dict[str, Any]:
    return heartbeat.handle_heartbeat(cmds.node, req.body)


@command("replSetRequestVotes")
async def _request_votes(cmds: Commands, req: Request) -> dict[str, Any]:
    return await election.handle_request_votes(cmds.node, req.body)


@command("rsdrillGetOplog")
async def _get_oplog(cmds: Commands, req: Request) -> dict[str, Any]:
    cmds.opcounters["getmore"] += 1
    return await sync.handle_get_oplog(cmds.node, req.body)


@command("rsdrillHasOplog")
async def _has_oplog(cmds: Commands, req: Request) -> dict[str, Any]:
    return await sync.handle_has_oplog(cmds.node, req.body)


@command("rsdrillSyncBegin")
async def _sync_begin(cmds: Commands, req: Request) -> dict[str, Any]:
    return await sync.handle_sync_begin(cmds.node, req.body)


@command("rsdrillClone")
async def _clone(cmds: Commands, req: Request) -> dict[str, Any]:
    return await sync.handle_clone(cmds.node, req.body)


async def keep_cursors_bounded(cmds: Commands) -> None:
    """Drop cursors beyond a generous count so abandoned ones cannot grow memory forever."""
    while True:
        await asyncio.sleep(60)
        excess = len(cmds.cursors) - 10_000
        for cid in list(cmds.cursors)[: max(excess, 0)]:
            del cmds.cursors[cid]
