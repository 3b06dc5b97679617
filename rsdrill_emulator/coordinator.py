"""The coordinator of a transaction that wrote on several shards, as mongod's
TransactionCoordinator runs it on the primary of the shard a router hands the commit to (the
transaction's first participant):

1. the participants, written to `config.transaction_coordinators` (w:majority);
2. prepareTransaction sent to each (each answers with its prepare timestamp once its prepare
   entry is majority-committed, or votes to abort: NoSuchTransaction, a conflict);
3. the decision written to the same document (w:majority): commit at the largest prepare
   timestamp, or abort; from here it never changes;
4. the decision sent to each participant until each acknowledged it;
5. the document deleted.

A participant that does not answer is asked again (its set may be electing); the transaction
lifetime limit bounds steps 1-2, after which the coordinator decides to abort. A stepdown stops
the coordinator (the router's commit fails and the driver retries it); the shard's next primary
finds the document and goes on from the last step written (mongod's recovery on step-up), so a
decision is made once and reaches every participant whichever members die meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any

from bson.int64 import Int64
from bson.timestamp import Timestamp

from rsdrill_emulator import writeconcern
from rsdrill_emulator.datastore import session_key
from rsdrill_emulator.errors import RETRYABLE_WRITE_CODES, CommandError
from rsdrill_emulator.node import SHARD_IDENTITY, MemberState
from rsdrill_emulator.oplog import OpTime
from rsdrill_emulator.remote_set import ReplicaSet
from rsdrill_emulator.transactions import LIFETIME_S, no_such_transaction

if TYPE_CHECKING:
    from rsdrill_emulator.node import Node

_log = logging.getLogger(__name__)

COORDINATORS_NS = "config.transaction_coordinators"
_MAJORITY = {"w": "majority"}
_RETRY_PAUSE_S = 0.1
# Answers that say nothing about the participant's transaction: ask again.
_ASK_AGAIN = RETRYABLE_WRITE_CODES | {133, 50}
_INTERRUPTED = 11602  # InterruptedDueToReplStateChange: this member stepped down
HANG_POINTS = ("hangBeforeWritingDecision", "hangBeforeDeletingCoordinatorDoc")
"""Fail points that hold a coordinator (mongod's of these names): after the votes, before the
decision is written; after every participant acknowledged it, before the document goes."""


class Coordinators:
    """The two-phase commits this member coordinates while primary."""

    def __init__(self, node: Node) -> None:
        self._node = node
        self._running: dict[tuple[bytes, int], asyncio.Task[dict[str, Any]]] = {}
        self._shards: dict[str, ReplicaSet] = {}
        self._config: ReplicaSet | None = None
        self.hang_points: set[str] = set()
        self.hang_entries: dict[str, int] = {}  # how often each hang point was reached

    # -- what the command handler asks ----------------------------------------------------

    async def coordinate(self, lsid: dict[str, Any], number: int, participants: list[str]
                         ) -> dict[str, Any] | None:  # fmt: skip
        """The outcome once decided and acknowledged by every participant: of the commit under
        way here, of the one this member's data holds, or of a new one over `participants`
        (none: None, nothing is coordinated here)."""
        node = self._node
        node.require_writable()
        task = self._running.get((session_key(lsid), number))
        if task is None:
            doc = node.store.get(COORDINATORS_NS, _doc_id(lsid, number))
            if doc is None and not participants:
                return None
            if doc is None:
                doc = {"_id": _doc_id(lsid, number), "participants": participants}
                await self._write(doc)
            task = self._running.get((session_key(lsid), number)) or self._start(doc)
        return await asyncio.shield(task)

    # -- recovery on step-up ----------------------------------------------------------------

    async def resume_loop(self) -> None:
        """Each time this member becomes a writable primary, go on with the coordinators its
        data holds (written by the primary before it)."""
        node = self._node
        resumed_term = -1
        while True:
            if node.writable and node.term != resumed_term:
                resumed_term = node.term
                for doc in node.store.documents(COORDINATORS_NS):
                    lsid, number = doc["_id"]["lsid"], int(doc["_id"]["txnNumber"])
                    if (session_key(lsid), number) not in self._running:
                        decided = (doc.get("decision") or {}).get("decision")
                        node.events.emit("coordinator_resumed", txn_number=number,
                                         decision=decided)  # fmt: skip
                        self._start(doc)
            # A new term's primary turns writable with a topology change (hello sees it).
            await node.topology_changed.wait(1.0)

    # -- the protocol -----------------------------------------------------------------------

    def _start(self, doc: dict[str, Any]) -> asyncio.Task[dict[str, Any]]:
        lsid, number = doc["_id"]["lsid"], int(doc["_id"]["txnNumber"])
        key = (session_key(lsid), number)
        task = asyncio.get_running_loop().create_task(self._drive(doc))
        self._running[key] = task
        task.add_done_callback(lambda _: self._running.pop(key, None))
        # Nobody may be waiting for it (resumed): its failure is logged, not lost.
        task.add_done_callback(_retrieve)
        return task

    async def _drive(self, doc: dict[str, Any]) -> dict[str, Any]:
        node, term = self._node, self._node.term
        lsid, number = doc["_id"]["lsid"], int(doc["_id"]["txnNumber"])
        participants: list[str] = list(doc["participants"])
        decision = doc.get("decision")
        if decision is None:
            deadline = time.monotonic() + LIFETIME_S
            votes = await asyncio.gather(
                *(self._prepare(shard, lsid, number, term, deadline) for shard in participants)
            )
            await self._hang_at(HANG_POINTS[0])
            refused = [why for why in votes if not isinstance(why, Timestamp)]
            if refused:
                decision = {"decision": "abort", "reason": str(refused[0])}
            else:
                decision = {"decision": "commit", "commitTimestamp": max(votes)}
            await self._write({**doc, "decision": decision}, term)
            node.events.emit("coordinator_decided", txn_number=number, **{
                k: str(v) for k, v in decision.items()})  # fmt: skip
        await asyncio.gather(
            *(self._send_decision(shard, lsid, number, decision, term) for shard in participants)
        )
        await self._hang_at(HANG_POINTS[1])
        self._still_primary(term)
        optime = node.write("d", COORDINATORS_NS, {"_id": doc["_id"]})
        await self._wait_majority(optime, term)
        if decision["decision"] == "abort":
            raise no_such_transaction(number, f"was aborted by its coordinator: "
                                              f"{decision.get('reason')}")  # fmt: skip
        return {}

    async def _hang_at(self, name: str) -> None:
        self.hang_entries[name] = self.hang_entries.get(name, 0) + 1
        while name in self.hang_points:
            await asyncio.sleep(0.01)

    async def _prepare(self, shard: str, lsid: dict[str, Any], number: int, term: int,
                       deadline: float) -> Timestamp | str:  # fmt: skip
        """The shard's vote: its prepare timestamp, or why it cannot commit."""
        cmd = {"prepareTransaction": 1, "lsid": lsid, "txnNumber": Int64(number),
               "autocommit": False, "writeConcern": _MAJORITY}  # fmt: skip
        while True:
            reply = await self._ask(shard, cmd, term)
            if reply.get("ok") and "writeConcernError" not in reply:
                return reply["prepareTimestamp"]
            if not reply.get("ok") and not _ask_again(reply):
                return f"{shard}: {reply.get('errmsg')}"
            if time.monotonic() > deadline:
                return f"{shard} did not answer within the transaction's lifetime"
            await asyncio.sleep(_RETRY_PAUSE_S)

    async def _send_decision(self, shard: str, lsid: dict[str, Any], number: int,
                             decision: dict[str, Any], term: int) -> None:  # fmt: skip
        """Until the shard acknowledged it (a decision is never given up on)."""
        base = {"lsid": lsid, "txnNumber": Int64(number), "autocommit": False,
                "writeConcern": _MAJORITY}  # fmt: skip
        if decision["decision"] == "commit":
            cmd = {"commitTransaction": 1, **base, "commitTimestamp": decision["commitTimestamp"]}
        else:
            cmd = {"abortTransaction": 1, **base}
        while True:
            reply = await self._ask(shard, cmd, term)
            if reply.get("ok") and "writeConcernError" not in reply:
                return
            if decision["decision"] == "abort" and reply.get("code") == 251:
                return  # it had nothing (never prepared, or already aborted)
            await asyncio.sleep(_RETRY_PAUSE_S)

    async def _ask(self, shard: str, cmd: dict[str, Any], term: int) -> dict[str, Any]:
        """One attempt on the shard's primary; a failure to reach it is a reply to retry."""
        self._still_primary(term)
        try:
            rs = await self._set_of(shard)
            if rs.primary is None:
                await rs.check()
            _, reply = await rs.on_primary("admin", cmd, retry=False, wait_s=0.0)
        except CommandError as exc:
            return {"ok": 0, "code": exc.code, "errmsg": str(exc), "retry": True}
        self._still_primary(term)
        return reply

    def _still_primary(self, term: int) -> None:
        node = self._node
        if node.term != term or node.state is not MemberState.PRIMARY:
            raise CommandError(_INTERRUPTED, "the coordinator's primary stepped down: its "
                               "next primary goes on with the commit")  # fmt: skip

    async def _write(self, doc: dict[str, Any], term: int | None = None) -> None:
        node = self._node
        optime = node.write("u", COORDINATORS_NS, doc, o2={"_id": doc["_id"]})
        await self._wait_majority(optime, node.term if term is None else term)

    async def _wait_majority(self, optime: OpTime, term: int) -> None:
        error = await writeconcern.wait_for(self._node, optime, _MAJORITY)
        if error is not None:
            self._still_primary(term)
            raise CommandError(int(error.get("code", 64)), str(error.get("errmsg")))

    # -- the other shards -------------------------------------------------------------------

    async def _set_of(self, shard: str) -> ReplicaSet:
        """A shard's set, from the config servers' `config.shards` (named by this member's
        shardIdentity, as addShard wrote it)."""
        found = self._shards.get(shard)
        if found is not None:
            return found
        if self._config is None:
            identity = self._node.store.get(*SHARD_IDENTITY)
            if identity is None:
                raise CommandError(70, "this member is not a shard: no shardIdentity")
            name, _, hosts = str(identity["configsvrConnectionString"]).partition("/")
            self._config = ReplicaSet(name, hosts.split(","))
        if self._config.primary is None:
            await self._config.check()
        _, reply = await self._config.on_primary(
            "config", {"find": "shards", "filter": {}}, retry=True, wait_s=0.0
        )
        for row in (reply.get("cursor") or {}).get("firstBatch", []):
            name, _, hosts = str(row["host"]).partition("/")
            self._shards.setdefault(row["_id"], ReplicaSet(name, hosts.split(",")))
        if shard not in self._shards:
            raise CommandError(70, f"shard {shard} is not in config.shards")
        return self._shards[shard]


def _doc_id(lsid: dict[str, Any], number: int) -> dict[str, Any]:
    return {"lsid": lsid, "txnNumber": Int64(number)}


def _ask_again(reply: dict[str, Any]) -> bool:
    return bool(reply.get("retry")) or reply.get("code") in _ASK_AGAIN


def _retrieve(task: asyncio.Task[dict[str, Any]]) -> None:
    with contextlib.suppress(asyncio.CancelledError):
        if (exc := task.exception()) is not None and not isinstance(exc, CommandError):
            _log.error("a transaction coordinator failed", exc_info=exc)
