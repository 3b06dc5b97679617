"""One replica-set member's state: role, term, data, oplog, what it knows of its peers.

The loops that move a member between states live beside it: `heartbeat.py` (peer liveness),
`election.py` (timer, candidacy, votes), `sync.py` (oplog fetching, initial sync, rollback).
This module owns the state they share and the operations that keep it consistent: local writes,
applying replicated entries, journaling, the commit point and write-concern waits.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import enum
import os
import random
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from bson.binary import Binary
from bson.int64 import Int64
from bson.objectid import ObjectId

from rsdrill.sandbox.auth import ROOT, aws_users, read_auth, server_keys, user_roles
from rsdrill.sandbox.certs import CLIENT_SUBJECT, MEMBER_SUBJECT
from rsdrill.sandbox.config import (
    EVENTS_FILE,
    SKIP_OPLOG_ENTRY_ENV,
    UNSAFE_MAJORITY_ACK_ENV,
    MemberSpec,
    ReplSetSpec,
    member_dir,
)
from rsdrill_emulator.configid import ConfigId
from rsdrill_emulator.datastore import DataStore
from rsdrill_emulator.errors import CommandError
from rsdrill_emulator.events import EventLog
from rsdrill_emulator.notify import Gate, Signal
from rsdrill_emulator.oplog import (
    NULL_OPTIME,
    Oplog,
    OpTime,
    TimestampClock,
    initiate_entry,
    make_entry,
    operations,
)
from rsdrill_emulator.peer import Peers
from rsdrill_emulator.prepared import PreparedTable
from rsdrill_emulator.snapshot import SnapshotHistory
from rsdrill_emulator.storage import Database
from rsdrill_emulator.storage_thread import StorageThread
from rsdrill_emulator.tls import member_client_context

# mongod's exit status after a fatal assertion it did not abort on (EXIT_ABRUPT).
FATAL_EXIT_STATUS = 14


class MemberState(enum.IntEnum):
    """replSetGetStatus `state` codes."""

    STARTUP = 0
    PRIMARY = 1
    SECONDARY = 2
    RECOVERING = 3
    STARTUP2 = 5
    UNKNOWN = 6
    ARBITER = 7
    DOWN = 8
    ROLLBACK = 9
    REMOVED = 10

    @property
    def label(self) -> str:
        return "(not reachable/healthy)" if self is MemberState.DOWN else self.name


# Where addShard writes a shard's identity (its name, its config servers).
SHARD_IDENTITY = ("admin.system.version", "shardIdentity")


@dataclass
class PeerView:
    """What heartbeats and replication traffic tell this member about another one."""

    spec: MemberSpec
    state: MemberState = MemberState.UNKNOWN
    health: int = 0
    term: int = -1
    applied: OpTime = NULL_OPTIME
    durable: OpTime = NULL_OPTIME
    applied_wall: dt.datetime | None = None
    durable_wall: dt.datetime | None = None
    last_heartbeat: dt.datetime | None = None
    last_heartbeat_recv: dt.datetime | None = None
    last_ok_mono: float | None = None
    last_answer_mono: float | None = None  # its last heartbeat answer: we reach it
    fetch_failed_mono: float | None = None  # an oplog fetch from it timed out (sync.py)
    # Last time we heard from it at all (heartbeat either way, or an oplog fetch): liveness.
    last_contact_mono: float | None = None
    ping_ms: int = 0
    sync_source: str = ""
    message: str = ""
    election_time: OpTime | None = None
    config_id: ConfigId | None = None  # the config it holds, as its heartbeats say


def wall(dt_value: dt.datetime | None) -> dt.datetime:
    return dt_value or dt.datetime.fromtimestamp(0, dt.UTC)


class Node:
    """A member: its replicated state and the primitives the protocol loops are built from."""

    def __init__(self, spec: ReplSetSpec, host: str, sandbox_dir: Path) -> None:
        self.spec = spec
        self.me = spec.member(host)
        self.dir = member_dir(sandbox_dir, self.me)
        self._unsafe_majority_ack = os.environ.get(UNSAFE_MAJORITY_ACK_ENV) == "1"
        # Planted (test-only): the Nth insert applied as a secondary is left out of the data.
        self._skip_insert = int(os.environ.get(SKIP_OPLOG_ENTRY_ENV) or 0)
        self._replicated_inserts = 0
        self.database = Database(self.dir / "data", cache_bytes=spec.cache_bytes)
        self.fresh = not self.database.exists()
        self.database.open()
        self.events = EventLog(self.dir / EVENTS_FILE, host)
        self.database.on_fatal = self.fatal
        self.store = DataStore(self.database)
        self.oplog = Oplog(spec.oplog_size_bytes, self.database)
        self.history = SnapshotHistory()  # older document versions, for snapshot reads
        self.prepared = PreparedTable(self.database)  # two-phase commits' prepared transactions
        self.clock = TimestampClock()
        # A sandbox made with a login: clients and members alike must log in (SCRAM).
        self.auth_keys = server_keys(sandbox_dir)
        # Every client must log in: with a password (SCRAM users), or with its certificate.
        self.requires_login = self.auth_keys is not None or spec.x509
        # Each user's built-in roles as (role, database); certificate users hold root.
        self.roles = user_roles(sandbox_dir)
        self.aws_users = aws_users(sandbox_dir)  # IAM ARNs that log in with MONGODB-AWS
        for subject in (CLIENT_SUBJECT, MEMBER_SUBJECT):
            self.roles.setdefault(subject, [ROOT])
        self.peer_calls = Peers(
            read_auth(sandbox_dir),
            tls=member_client_context(sandbox_dir) if spec.tls else None,
            x509=spec.x509,
        )
        self.peers = {m.host: PeerView(m) for m in spec.members if m.host != host}
        # The config's (version, term): the sandbox's file is version 1 of term 0 (replconfig.py).
        self.config_id = ConfigId(1, 0)
        self.config_changed = Signal()

        self.state = MemberState.STARTUP
        self.term = 0
        self.voted: tuple[int, int] | None = None
        self.writable = False
        self.primary_host: str | None = None
        self.last_durable = NULL_OPTIME
        self.commit_point = NULL_OPTIME
        # Ops before this optime were written by the current primary in an older term, so the
        # Raft rule forbids committing by counting replicas until the new term's first entry.
        self.term_start = NULL_OPTIME
        self.min_valid = NULL_OPTIME
        # The rollback id (serverStatus repl.rbid): one more after each rollback, kept on disk.
        self.rbid = 1
        self.needs_initial_sync = False
        self.too_stale = False
        # The stopReplProducer fail point is on: the oplog fetcher waits.
        self.replication_stopped = False
        self._flushing = asyncio.Lock()
        # The flush asked for by j:true writes that has not begun: later ones share it.
        self._asked_flush: asyncio.Task[None] | None = None
        self._storage_idle = Gate()
        self._storage_thread: StorageThread | None = None  # started by the first commit
        self.sync_source = ""
        self.info_message = ""
        self.initial_sync_status: dict[str, Any] | None = None
        self.election_metrics: dict[str, Any] | None = None
        self.election_time: OpTime | None = None
        self.frozen_until = 0.0
        self.election_deadline = 0.0
        self.takeover_at: float | None = None  # a priority takeover's moment (takeover.py)
        self.started_mono = time.monotonic()
        self.process_id = ObjectId()
        self.topology_counter = 0

        self.topology_changed = Signal()
        self.progress = Signal()  # positions or commit point moved
        self.new_entries = Signal()
        self.heartbeat_now = Signal()
        # journal.py's cue after each commit (the database's `on_dirty` is its cue after a write).
        self.on_commit: Callable[[], None] | None = None
        self.commits = 0
        # What the election timer waits on (election.py): its deadline, a takeover, a freeze,
        # the state or the config changed.
        self.timer_changed = Signal()
        self.reset_election_timer()

    # -- identity --------------------------------------------------------------------------

    @property
    def host(self) -> str:
        return self.me.host

    @property
    def is_arbiter(self) -> bool:
        return self.me.arbiter_only

    @property
    def last_applied(self) -> OpTime:
        return self.oplog.newest

    @property
    def last_applied_wall(self) -> dt.datetime:
        entry = self.oplog.newest_entry()
        return wall(entry["wall"] if entry else None)

    def election_id(self) -> ObjectId:
        """Larger for every term: MongoDB's OID::fromTerm layout (max timestamp, then term)."""
        return ObjectId(b"\x7f\xff\xff\xff" + self.term.to_bytes(8, "big"))

    def set_state(self, state: MemberState, **why: Any) -> None:
        if state is self.state:
            return
        self.events.emit("state", state=state.name, previous=self.state.name, term=self.term, **why)
        self.state = state
        self.heartbeat_now.fire()  # tell the others at once, as MongoDB restarts heartbeats
        if state is not MemberState.PRIMARY:
            self.writable = False
            if self.primary_host == self.host:
                self.primary_host = None
        self.bump_topology()
        self.progress.fire()
        self.timer_changed.fire()

    def bump_topology(self) -> None:
        """Something a client's hello would see changed: wake awaitable hellos."""
        self.topology_counter += 1
        self.topology_changed.fire()

    def set_primary_host(self, host: str | None) -> None:
        if host != self.primary_host:
            self.primary_host = host
            self.bump_topology()

    # -- start-up --------------------------------------------------------------------------

    def boot(self, *, initiate: bool) -> None:
        """Open the data directory; decide whether this member needs an initial sync.

        Only metadata and the newest oplog entry are read: like a real storage engine, a
        restart on a kept volume costs the same whatever the size of the data.
        """
        if self.fresh:
            self.database.set_meta("initialized", True)
            if self.is_arbiter:
                self.set_state(MemberState.ARBITER)
            elif initiate:
                self._record_op(initiate_entry())
                self.events.emit("initiated")
                self.set_state(MemberState.SECONDARY, reason="initiated")
            else:
                self.needs_initial_sync = True
                self.database.set_meta("needs_initial_sync", True)
                self.set_state(MemberState.STARTUP2)
            self.database.commit()
            return
        self.term = int(self.database.get_meta("term") or 0)
        vote = self.database.get_meta("vote")
        self.voted = (int(vote[0]), int(vote[1])) if vote else None
        self.needs_initial_sync = bool(self.database.get_meta("needs_initial_sync"))
        self.min_valid = OpTime.from_doc(self.database.get_meta("min_valid"))
        self.rbid = int(self.database.get_meta("rbid") or 1)
        newest = self.oplog.newest_entry()
        if newest is not None:
            self.clock.observe(newest["ts"])
            self.history.changed_at_most(newest["ts"])
            if self.store.get(*SHARD_IDENTITY) is not None:
                self.history.keep_always(newest["ts"])
        self.term = max(self.term, self.last_applied.term)
        self.last_durable = self.last_applied
        self.events.emit("storage_opened", oplog_entries=len(self.oplog),
                         bytes=self.database.size_bytes())  # fmt: skip
        if self.is_arbiter:
            self.set_state(MemberState.ARBITER)
        elif self.needs_initial_sync:
            self.set_state(MemberState.STARTUP2)
        else:
            self.set_state(MemberState.RECOVERING, reason="startup")

    # -- durability ------------------------------------------------------------------------

    def _record_op(self, entry: dict[str, Any], *, data: bool = True) -> None:
        """Apply an entry to data and oplog (durable at the next commit); with `data` false
        to the oplog only (the planted skip)."""
        if data:
            self.history.before_apply(entry, self.store)
            self.store.apply(entry)
            if entry["ns"] == SHARD_IDENTITY[0] and self.store.get(*SHARD_IDENTITY) is not None:
                self.history.keep_always(entry["ts"])  # this member's set became a shard
        oldest = self.oplog.oldest
        self.oplog.append(entry)
        if self.oplog.oldest != oldest:  # entries fell off: so do their change-stream images
            now = self.oplog.oldest
            self.store.expire_images(now.term, now.secs, now.inc)
        self.clock.observe(entry["ts"])
        self.prepared.applied(entry)
        self.new_entries.fire()

    def set_meta(self, key: str, value: Any) -> None:
        self.database.set_meta(key, value)

    async def flush(self, *, asked: bool = False) -> None:
        """Commit now; everything applied so far becomes durable."""
        async with self._flushing:
            if asked:  # begun: a write from now on may miss this commit
                self._asked_flush = None
            target = self.last_applied
            committed = self.database.dirty
            # Only writes make the database dirty, and only a commit makes it clean: clean, the
            # commit before this one (waited for under the lock) took everything up to target.
            if committed:
                # On a thread: a throttled or stalled disk holds up what needs the database
                # only; heartbeats and status commands are still answered, as by mongod's.
                # Idle again once the transaction is in the log: reads and writes go on while
                # it is fsynced, as mongod's beside its journal flush.
                self._storage_idle.close()
                loop = asyncio.get_running_loop()
                if self._storage_thread is None or self._storage_thread.loop is not loop:
                    if self._storage_thread is not None:
                        self._storage_thread.close()
                    self._storage_thread = StorageThread(loop)
                try:
                    await self._storage_thread.run(
                        lambda: self.database.commit(lambda: self._storage_idle.open(loop))
                    )
                finally:
                    self._storage_idle.open()
                self.commits += 1
            if target > self.last_durable:
                self.last_durable = target
                # A primary with no one to hear from (rs1) commits by its own durability alone.
                self.advance_commit_point()
                self.progress.fire()
            if committed and self.on_commit is not None:
                self.on_commit()

    def ask_flush(self) -> None:
        """A flush soon, for a j:true write: one not begun yet takes this write too, so the
        writes that come while a commit runs share one task and one turn at the lock."""
        asked, loop = self._asked_flush, asyncio.get_running_loop()
        if asked is None or asked.done() or asked.get_loop() is not loop:
            self._asked_flush = loop.create_task(self.flush(asked=True))

    async def storage_idle(self) -> None:
        """Wait while a commit writes the log: touching the database meanwhile would hold the
        event loop, and every heartbeat with it, until the write is done."""
        await self._storage_idle.wait()

    def _save_term(self) -> None:
        self.database.set_meta("term", self.term)
        self.database.set_meta("vote", list(self.voted) if self.voted else None)

    async def persist_term(self) -> None:
        """The term and vote, durable before anyone is told (Raft's rule)."""
        self._save_term()
        await self.flush()

    # -- terms -----------------------------------------------------------------------------

    def observe_term(self, term: int, source: str) -> bool:
        """Adopt a newer term seen in any message; a primary steps down. True if it was newer."""
        if term <= self.term:
            return False
        self.term = term
        self.voted = None
        self._save_term()
        if self.state is MemberState.PRIMARY:
            self.step_down(reason=f"saw newer term {term} from {source}")
        return True

    def step_down(self, *, reason: str, freeze_s: float = 0.0) -> None:
        self.events.emit("stepdown", reason=reason, term=self.term)
        self.frozen_until = max(self.frozen_until, time.monotonic() + freeze_s)
        self.set_state(MemberState.SECONDARY, reason=reason)
        self.reset_election_timer()

    # -- election timer --------------------------------------------------------------------

    def reset_election_timer(self) -> None:
        """electionTimeoutMillis plus a random offset of up to 15 %, as MongoDB draws it."""
        timeout = self.spec.settings.election_timeout_ms / 1000
        self.election_deadline = time.monotonic() + timeout + random.uniform(0, 0.15 * timeout)
        self.timer_changed.fire()  # a new draw may come before the one the timer sleeps to

    # -- writes on the primary -------------------------------------------------------------

    def require_writable(self) -> None:
        if not self.writable:
            raise CommandError(10107, "not primary")

    def write(
        self,
        op: str,
        ns: str,
        o: dict[str, Any],
        *,
        o2: dict[str, Any] | None = None,
        session: dict[str, Any] | None = None,
    ) -> OpTime:
        """Create, apply and journal a new oplog entry in the current term."""
        self.require_writable()
        entry = make_entry(op, ns, o, ts=self.clock.next(), term=self.term, o2=o2, session=session)
        self._name_collections(entry)
        self._record_op(entry)  # the commit point moves with durable positions, not writes
        return OpTime.of(entry)

    def _name_collections(self, entry: dict[str, Any]) -> None:
        """Each operation names its collection's UUID (`ui`), a new one for a collection it
        creates, as mongod's oplog entries do: applying them gives every member the same."""
        new: dict[str, uuid.UUID] = {}
        for op in operations(entry):
            if op["op"] in ("i", "u", "d"):
                ns = op["ns"]
                found = self.store.uuid_of(ns) or new.setdefault(ns, uuid.uuid4())
                op["ui"] = Binary.from_uuid(found)
            elif op["op"] == "c" and "viewOn" not in op["o"]:
                # create, and createIndexes on a collection it creates, name the new one
                name = op["o"].get("create") or op["o"].get("createIndexes")
                if isinstance(name, str):
                    ns = f"{op['ns'].split('.', 1)[0]}.{name}"
                    op["ui"] = Binary.from_uuid(self.store.uuid_of(ns) or uuid.uuid4())

    def write_noop(self, message: str) -> OpTime:
        entry = make_entry("n", "", {"msg": message}, ts=self.clock.next(), term=self.term)
        self._record_op(entry)
        return OpTime.of(entry)

    # -- replication -----------------------------------------------------------------------

    def apply_replicated(self, entry: dict[str, Any]) -> None:
        if self._skip_insert and entry.get("op") == "i":
            self._replicated_inserts += 1
            if self._replicated_inserts == self._skip_insert:
                self.events.emit("planted_skip", ns=entry.get("ns"), id=repr(entry["o"].get("_id")))
                self._record_op(entry, data=False)
                return
        self._record_op(entry)

    def note_position(
        self,
        host: str,
        applied: OpTime,
        durable: OpTime,
        applied_wall: dt.datetime | None = None,
        durable_wall: dt.datetime | None = None,
    ) -> None:
        """A peer told us how far it has applied and journaled (fetches and heartbeats)."""
        peer = self.peers.get(host)
        if peer is None:
            return
        peer.last_contact_mono = time.monotonic()
        changed = applied != peer.applied or durable != peer.durable
        # Taken as reported, not maxed: a member that rolled back really is behind now.
        peer.applied, peer.durable = applied, durable
        if applied_wall:
            peer.applied_wall = applied_wall
        if durable_wall:
            peer.durable_wall = durable_wall
        if changed:
            self.advance_commit_point()
            self.progress.fire()

    def _data_voters(self) -> list[tuple[OpTime, OpTime]]:
        """(applied, durable) of every voting data-bearing member, this one included."""
        out = []
        if self.me.votes and not self.is_arbiter:
            out.append((self.last_applied, self.last_durable))
        for peer in self.peers.values():
            if peer.spec.votes and not peer.spec.arbiter_only:
                out.append((peer.applied, peer.durable))
        return out

    def advance_commit_point(self) -> None:
        """Primary: the newest optime durable on a write-majority, from this term on."""
        if self.state is not MemberState.PRIMARY:
            return
        durables = sorted((d for _, d in self._data_voters()), reverse=True)
        need = self.spec.write_majority
        if len(durables) < need:
            return
        candidate = durables[need - 1]
        if candidate >= self.term_start and candidate > self.commit_point:
            self.commit_point = candidate
            self.progress.fire()

    def learn_commit_point(self, point: OpTime) -> None:
        """Secondary: the primary's commit point, capped at what we have applied ourselves,
        once our newest entry is of the point's term or of the primary's: then our log is the
        primary's up to it. An entry of an older term may be on a branch the primary never had
        (a deposed primary's last writes, fetched before it learned of the new term): capping
        at it would call those committed, and majority reads would serve them (mongod's rule
        too: the commit point is not advanced onto an older term's entry)."""
        if self.last_applied.term not in (point.term, self.term):
            return
        point = min(point, self.last_applied)
        if point > self.commit_point:
            self.commit_point = point
            self.progress.fire()

    # -- write concern ---------------------------------------------------------------------

    def acknowledged(self, optime: OpTime, w: int | str, j: bool) -> bool:
        """Whether a write at `optime` has the write concern `w`, `j` now."""
        if j and self.last_durable < optime:
            return False
        if w == "majority" and not self._unsafe_majority_ack:
            count = sum(1 for _, d in self._data_voters() if d >= optime)
            return count >= self.spec.write_majority
        count = 1 if (self.last_durable if j else self.last_applied) >= optime else 0
        if w == "majority":  # the unsafe test switch: this member's own copy is enough
            return count == 1
        count += sum(
            1
            for p in self.peers.values()
            if not p.spec.arbiter_only and (p.durable if j else p.applied) >= optime
        )
        return count >= int(w)

    # -- views for hello and replSetGetStatus ----------------------------------------------

    def topology_version(self) -> dict[str, Any]:
        return {"processId": self.process_id, "counter": Int64(self.topology_counter)}

    def member_state_of(self, host: str) -> MemberState:
        if host == self.host:
            return self.state
        peer = self.peers[host]
        return peer.state if peer.health else MemberState.DOWN

    def uptime_s(self) -> int:
        return int(time.monotonic() - self.started_mono)

    def is_electable(self) -> bool:
        return (
            self.state is MemberState.SECONDARY
            and self.me.priority > 0
            and self.me.votes > 0
            and time.monotonic() >= self.frozen_until
        )

    def fatal(self, message: str) -> NoReturn:
        """A storage write failed: like mongod's fatal assertion, log it and exit at once (the
        set fails over; whatever was not committed is lost, as in a crash)."""
        self.events.emit("fatal", error=message, state=self.state.name)
        print(f"member {self.host}: fatal storage error: {message}; aborting", file=sys.stderr,
              flush=True)  # fmt: skip
        os._exit(FATAL_EXIT_STATUS)

    async def shutdown(self) -> None:
        """Journal what is buffered and leave at once (what a clean mongod shutdown ends with)."""
        await self.flush()
        self.events.emit("shutdown")
        self.database.close()
        os._exit(0)
