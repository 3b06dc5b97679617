"""A shard's part of a two-phase commit, as its primary runs it (rsdrill_emulator/prepared.py
holds what every member keeps of it): prepareTransaction from the coordinator, then its
decision, commitTransaction at the commit timestamp or abortTransaction."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bson.timestamp import Timestamp

from rsdrill_emulator.errors import CommandError
from rsdrill_emulator.prepared import (
    ABORT_STATEMENT,
    PREPARE_STATEMENT,
    Prepared,
    session_fields,
)
from rsdrill_emulator.transactions import (
    COMMIT_STATEMENT,
    Commands,
    Transactions,
    no_such_transaction,
    written_since_snapshot,
)

if TYPE_CHECKING:
    from rsdrill_emulator.request import Request


async def prepare(cmds: Commands, table: Transactions, req: Request) -> dict[str, Any]:
    """The transaction written as a prepare entry and held until the decision; the reply's
    prepareTimestamp once that entry is majority-committed. Asked again once prepared (by a
    coordinator's next primary): the same timestamp."""
    node = cmds.node
    node.require_writable()
    lsid, number = req.body["lsid"], int(req.body["txnNumber"])
    done = node.prepared.find(lsid, number)
    if done is not None:
        reply = {"prepareTimestamp": done.prepare_ts}
        return await cmds.finish_write(req, reply, node.last_applied)
    txn = table.current(lsid, number)
    if txn is None:
        raise no_such_transaction(number, "does not match any in-progress transaction")
    table.check_alive(node, txn)
    if written_since_snapshot(node, txn):
        txn.abort()
        raise CommandError(112, "Write conflict at prepare")
    session = session_fields(lsid, number, PREPARE_STATEMENT, {"prepared": True})
    optime = node.write("c", "admin.$cmd", {"applyOps": txn.ops, "prepare": True},
                        session=session)  # fmt: skip
    txn.state = "prepared"
    txn.changes.clear()  # held by the member's prepared table now
    return await cmds.finish_write(req, {"prepareTimestamp": optime.timestamp}, optime)


async def commit(
    cmds: Commands, table: Transactions, req: Request, prepared: Prepared
) -> dict[str, Any]:
    """The coordinator's commit decision, at its commit timestamp."""
    node = cmds.node
    node.require_writable()
    at = req.body.get("commitTimestamp")
    if not isinstance(at, Timestamp):
        raise CommandError(72, "commitTimestamp must be given to commit a prepared transaction")
    if at < prepared.prepare_ts:
        raise CommandError(72, f"commitTimestamp {at} is before the transaction's "
                               f"prepareTimestamp {prepared.prepare_ts}")  # fmt: skip
    o = {"commitTransaction": 1, "commitTimestamp": at,
         "prepareTimestamp": prepared.prepare_ts, "applyOps": prepared.ops}  # fmt: skip
    session = session_fields(prepared.lsid, prepared.number, COMMIT_STATEMENT,
                             {"committed": True})  # fmt: skip
    optime = node.write("c", "admin.$cmd", o, session=session)
    if (txn := table.current(prepared.lsid, prepared.number)) is not None:
        txn.state, txn.commit_optime = "committed", optime
    return await table.commit_concern(cmds, req, optime)


async def abort(
    cmds: Commands, table: Transactions, req: Request, prepared: Prepared
) -> dict[str, Any]:
    """The coordinator's abort decision (the entry keeps the operations, so that a rollback
    of it can prepare the part again)."""
    node = cmds.node
    node.require_writable()
    o = {"abortTransaction": 1, "prepareTimestamp": prepared.prepare_ts,
         "preparedOps": prepared.ops}  # fmt: skip
    session = session_fields(prepared.lsid, prepared.number, ABORT_STATEMENT,
                             {"aborted": True})  # fmt: skip
    optime = node.write("c", "admin.$cmd", o, session=session)
    if (txn := table.current(prepared.lsid, prepared.number)) is not None:
        txn.state = "aborted"
    return await cmds.finish_write(req, {}, optime)
