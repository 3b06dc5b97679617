"""Multi-document transactions on the sandbox emulator, with pymongo as the client: isolation,
write conflicts, one oplog entry per transaction, commit retried after a failover, abort on
stepdown, rollback as a unit, and snapshot reads outside transactions."""

from __future__ import annotations

import random
import threading
import uuid
from typing import Any

import bson
import pytest
from bson.binary import Binary
from bson.int64 import Int64
from pymongo import ReadPreference, WriteConcern
from pymongo.errors import OperationFailure
from pymongo.read_concern import ReadConcern

from rsdrill.sandbox.config import member_dir
from rsdrill.sandbox.groundtruth import read_events
from tests.harness.members import (
    freeze_others,
    member_state,
    ops_in_progress,
    wait_until,
    wire_command,
    writable_primary,
)

MAJORITY = WriteConcern(w="majority")


def _ledger(client: Any) -> Any:
    return client.bank.get_collection("ledger", write_concern=MAJORITY)


def test_transaction_reads_its_snapshot_and_hides_its_writes_until_commit(
    replset, client_for
) -> None:
    sandbox = replset("rs3")
    client = client_for(sandbox)
    ledger = _ledger(client)
    ledger.insert_one({"_id": "alice", "balance": 100})
    with client.start_session() as session:
        session.start_transaction(read_concern=ReadConcern("snapshot"), write_concern=MAJORITY)
        assert ledger.find_one({"_id": "alice"}, session=session)["balance"] == 100
        # Changed by someone else after the snapshot: the transaction still reads 100.
        ledger.update_one({"_id": "alice"}, {"$set": {"balance": 50}})
        assert ledger.find_one({"_id": "alice"}, session=session)["balance"] == 100
        ledger.insert_one({"_id": "bob", "balance": 7}, session=session)
        assert ledger.count_documents({}, session=session) == 2
        assert ledger.find_one({"_id": "bob"}) is None  # not committed: nobody else sees it
        session.commit_transaction()
    assert ledger.find_one({"_id": "bob"}) == {"_id": "bob", "balance": 7}
    assert ledger.find_one({"_id": "alice"})["balance"] == 50
    # w:majority on the commit: every secondary has it once one has, and they all will.
    for member in sandbox.spec.members:
        direct = client_for(member.host, readPreference="secondaryPreferred")
        wait_until(lambda d=direct: d.bank.ledger.find_one({"_id": "bob"}), 10, "replicated")


def test_second_writer_of_a_document_gets_write_conflict(replset, client_for) -> None:
    sandbox = replset("rs3")
    client = client_for(sandbox)
    ledger = _ledger(client)
    ledger.insert_one({"_id": "alice", "balance": 100})
    with client.start_session() as first, client.start_session() as second:
        first.start_transaction()
        second.start_transaction()
        ledger.update_one({"_id": "alice"}, {"$inc": {"balance": -10}}, session=first)
        with pytest.raises(OperationFailure) as conflict:
            ledger.update_one({"_id": "alice"}, {"$inc": {"balance": -20}}, session=second)
        assert conflict.value.code == 112
        assert conflict.value.has_error_label("TransientTransactionError")
        first.commit_transaction()
        with pytest.raises(OperationFailure) as gone:
            second.commit_transaction()
        assert gone.value.code == 251  # NoSuchTransaction: the conflict aborted it
        assert gone.value.has_error_label("TransientTransactionError")
    assert ledger.find_one({"_id": "alice"})["balance"] == 90


def test_concurrent_transfers_across_a_stepdown_lose_no_update(replset, client_for) -> None:
    """Read-modify-write transfers from several threads at once: without snapshot isolation and
    write conflicts some would overwrite each other and the total would drift."""
    sandbox = replset("rs3")
    client = client_for(sandbox)
    accounts = _ledger(client)
    accounts.insert_many([{"_id": i, "balance": 100} for i in range(5)])
    committed: list[int] = []

    def transfer(session: Any, rng: random.Random) -> None:
        source, target = rng.sample(range(5), 2)
        a = accounts.find_one({"_id": source}, session=session)["balance"]
        b = accounts.find_one({"_id": target}, session=session)["balance"]
        accounts.update_one({"_id": source}, {"$set": {"balance": a - 7}}, session=session)
        accounts.update_one({"_id": target}, {"$set": {"balance": b + 7}}, session=session)

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        with client.start_session() as session:
            for _ in range(40):
                session.with_transaction(lambda s: transfer(s, rng), write_concern=MAJORITY)
                committed.append(seed)

    old = writable_primary(sandbox)
    assert old is not None
    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    wait_until(lambda: len(committed) >= 30, 30, "transfers under way")
    client_for(old.host).admin.command("replSetStepDown", 30)
    at_stepdown = len(committed)
    for thread in threads:
        thread.join(120)
    assert at_stepdown < len(committed) == 160
    assert sum(d["balance"] for d in accounts.find()) == 500
    for member in sandbox.spec.members:
        direct = client_for(member.host, readPreference="secondaryPreferred").bank.ledger
        wait_until(
            lambda d=direct: (
                sorted(d.find(), key=lambda x: x["_id"])
                == sorted(accounts.find(), key=lambda x: x["_id"])
            ),
            10,
            f"the same balances on {member.host}",
        )


def test_a_write_outside_waits_for_the_transaction_holding_its_document(
    replset, client_for
) -> None:
    sandbox = replset("rs1")
    client = client_for(sandbox)
    ledger = _ledger(client)
    ledger.insert_many([{"_id": "alice", "balance": 100}, {"_id": "bob", "balance": 0}])
    outside: list[Any] = []
    with client.start_session() as session:
        session.start_transaction()
        ledger.update_one({"_id": "alice"}, {"$inc": {"balance": -10}}, session=session)
        ledger.update_one({"_id": "bob"}, {"$inc": {"balance": 1}})  # not held: no wait
        rich = {"q": {"balance": {"$gte": 100}}, "u": {"$set": {"balance": 0}}}
        with pytest.raises(OperationFailure) as timed_out:
            client.bank.command({"update": "ledger", "updates": [rich], "maxTimeMS": 300})
        assert timed_out.value.code == 50
        waiting = threading.Thread(
            target=lambda: outside.append(
                ledger.update_one({"_id": "alice"}, {"$inc": {"balance": -5}})
            )
        )
        waiting.start()
        # The write reached the member and waits there for the transaction's document.
        host = sandbox.spec.members[0].host
        wait_until(lambda: ops_in_progress(host, update="ledger"), 10, "the update to be held")
        assert waiting.is_alive() and not outside  # held by the transaction
        session.commit_transaction()
        waiting.join(10)
    assert outside and outside[0].modified_count == 1
    assert ledger.find_one({"_id": "alice"})["balance"] == 85  # applied after the commit
    assert ledger.find_one({"_id": "bob"})["balance"] == 1


def test_a_failed_statement_aborts_the_whole_transaction(replset, client_for) -> None:
    sandbox = replset("rs1")
    client = client_for(sandbox)
    ledger = _ledger(client)
    ledger.insert_one({"_id": "taken"})
    with client.start_session() as session:
        session.start_transaction()
        ledger.insert_one({"_id": "new"}, session=session)
        with pytest.raises(OperationFailure):
            ledger.insert_one({"_id": "taken"}, session=session)  # duplicate key
        with pytest.raises(OperationFailure) as after:
            ledger.insert_one({"_id": "other"}, session=session)
        assert after.value.code == 251
        session.abort_transaction()
    assert sorted(d["_id"] for d in ledger.find()) == ["taken"]


def test_commit_replicates_as_one_oplog_entry(replset, client_for) -> None:
    sandbox = replset("rs3")
    client = client_for(sandbox)
    ledger = _ledger(client)
    ledger.insert_one({"_id": "alice", "balance": 100})
    with client.start_session() as session:
        session.start_transaction(write_concern=MAJORITY)
        ledger.update_one({"_id": "alice"}, {"$inc": {"balance": -30}}, session=session)
        ledger.insert_one({"_id": "bob", "balance": 30}, session=session)
        ledger.delete_one({"_id": "nobody"}, session=session)
        session.commit_transaction()
        lsid = session.session_id
    for member in sandbox.spec.members:
        direct = client_for(member.host, readPreference="secondaryPreferred")
        entry = wait_until(
            lambda d=direct: d.local["oplog.rs"].find_one({"o.applyOps": {"$exists": True}}),
            10,
            f"the transaction's entry on {member.host}",
        )
        assert [(op["op"], op["ns"]) for op in entry["o"]["applyOps"]] == [
            ("u", "bank.ledger"),
            ("i", "bank.ledger"),
        ]
        assert entry["lsid"]["id"] == lsid["id"] and entry["txnNumber"] >= 1
        docs = sorted(direct.bank.ledger.find(), key=lambda d: d["_id"])
        assert docs == [{"_id": "alice", "balance": 70}, {"_id": "bob", "balance": 30}]


def test_commit_waits_for_its_write_concern_and_can_be_committed_again(replset, client_for) -> None:
    sandbox = replset("rs3")
    client = client_for(sandbox)
    ledger = _ledger(client)
    ledger.insert_one({"_id": "warm-up"})
    primary = writable_primary(sandbox)
    assert primary is not None
    frozen = next(m for m in sandbox.spec.members if m.host != primary.host)
    sandbox.stop(frozen)
    try:
        with client.start_session() as session:
            session.start_transaction(write_concern=WriteConcern(w=3, wtimeout=500))
            ledger.insert_one({"_id": "needs-three"}, session=session)
            with pytest.raises(OperationFailure) as unknown:
                session.commit_transaction()
            assert unknown.value.code == 64  # WriteConcernFailed: committed, not replicated
            assert unknown.value.has_error_label("UnknownTransactionCommitResult")
            assert ledger.find_one({"_id": "needs-three"}) is not None
        with client.start_session() as bounded:
            bounded.start_transaction(write_concern=WriteConcern(w=3), max_commit_time_ms=300)
            ledger.insert_one({"_id": "bounded"}, session=bounded)
            with pytest.raises(OperationFailure) as expired:
                bounded.commit_transaction()
            assert expired.value.code == 50  # MaxTimeMSExpired, as a writeConcernError
            assert expired.value.has_error_label("UnknownTransactionCommitResult")
            sandbox.cont(frozen)
            bounded.commit_transaction()  # again: answered as committed, no second write
    finally:
        sandbox.cont(frozen)
    direct = client_for(frozen.host, readPreference="secondaryPreferred")
    wait_until(lambda: direct.bank.ledger.find_one({"_id": "bounded"}), 10, "replicated")
    assert ledger.count_documents({"_id": {"$in": ["needs-three", "bounded"]}}) == 2


def _transaction_commands(lsid: dict[str, Any], number: int) -> tuple[dict[str, Any], ...]:
    session = {"lsid": lsid, "txnNumber": Int64(number), "autocommit": False}
    insert = {"insert": "ledger", "documents": [{"_id": "payment-1"}], "startTransaction": True,
              **session, "$db": "bank"}  # fmt: skip
    commit = {"commitTransaction": 1, **session, "writeConcern": {"w": "majority"},
              "$db": "admin"}  # fmt: skip
    return insert, commit


def test_retried_commit_succeeds_on_the_new_primary(replset, client_for) -> None:
    sandbox = replset("rs3")
    old = writable_primary(sandbox)
    assert old is not None
    insert, commit = _transaction_commands({"id": Binary(uuid.uuid4().bytes, 4)}, 1)
    assert wire_command(old.host, insert)["ok"] == 1.0
    assert wire_command(old.host, commit)["ok"] == 1.0
    sandbox.kill(old)
    new = wait_until(lambda: writable_primary(sandbox), 15, "a new primary")
    # The reply was "lost": the client commits again, on the new primary.
    again = wire_command(new.host, commit)
    assert again["ok"] == 1.0, again
    abort = {"abortTransaction": 1, **{k: v for k, v in commit.items() if k != "commitTransaction"}}
    assert wire_command(new.host, abort)["codeName"] == "TransactionCommitted"
    assert client_for(sandbox).bank.ledger.count_documents({}) == 1


@pytest.mark.parametrize("fault", ["stepdown", "kill"])
def test_failover_aborts_the_transaction_in_progress(replset, client_for, fault: str) -> None:
    sandbox = replset("rs3")
    client = client_for(sandbox)
    ledger = _ledger(client)
    ledger.insert_one({"_id": "warm-up"})
    old = writable_primary(sandbox)
    assert old is not None
    with client.start_session() as session:
        session.start_transaction(write_concern=MAJORITY)
        ledger.insert_one({"_id": "in-flight"}, session=session)
        if fault == "stepdown":
            client_for(old.host).admin.command("replSetStepDown", 30)
        else:
            sandbox.kill(old)
        wait_until(lambda: (p := writable_primary(sandbox)) and p.host != old.host, 15,
                   "a new primary")  # fmt: skip
        with pytest.raises(OperationFailure) as aborted:
            session.commit_transaction()
        assert aborted.value.has_error_label("TransientTransactionError"), aborted.value.details
    assert ledger.find_one({"_id": "in-flight"}) is None
    # What a driver does on that label: run the transaction again; it commits once.
    with client.start_session() as session:
        session.with_transaction(lambda s: ledger.insert_one({"_id": "in-flight"}, session=s))
    assert ledger.count_documents({"_id": "in-flight"}) == 1


def test_rollback_undoes_a_transaction_as_a_unit(replset, client_for) -> None:
    sandbox = replset("rs3", election_timeout_ms=2000)
    client = client_for(sandbox)
    _ledger(client).insert_many([{"_id": f"safe-{i}"} for i in range(3)])
    old = writable_primary(sandbox)
    assert old is not None
    others = freeze_others(sandbox, old, 1.5)
    direct = client_for(old.host)
    ledger = direct.bank.get_collection("ledger", write_concern=WriteConcern(w=1, j=True))
    with direct.start_session() as session:
        session.start_transaction(write_concern=WriteConcern(w=1, j=True))
        ledger.insert_one({"_id": "lost-1"}, session=session)
        ledger.delete_one({"_id": "safe-0"}, session=session)
        ledger.insert_one({"_id": "lost-2"}, session=session)
        session.commit_transaction()
    sandbox.kill(old)
    for m in others:
        sandbox.cont(m)
    wait_until(lambda: writable_primary(sandbox), 20, "a new primary")
    sandbox.start(old)
    wait_until(lambda: member_state(old.host) == "SECONDARY", 30, "old primary back as SECONDARY")
    events = read_events(member_dir(sandbox.directory, old) / "events.jsonl")
    ends = [e for e in events if e["event"] == "rollback_end"]
    assert ends and ends[-1]["undone_entries"] == 1  # the transaction's single entry
    files = list((member_dir(sandbox.directory, old) / "data" / "rollback").rglob("*.bson"))
    saved = sorted(d["_id"] for f in files for d in bson.decode_all(f.read_bytes()))
    assert saved == ["lost-1", "lost-2"]
    on_old = client_for(old.host, readPreference="secondaryPreferred").bank.ledger
    assert sorted(d["_id"] for d in on_old.find()) == ["safe-0", "safe-1", "safe-2"]


def test_snapshot_session_reads_at_its_first_reads_time(replset, client_for) -> None:
    sandbox = replset("rs3")
    client = client_for(sandbox)
    ledger = _ledger(client)
    ledger.insert_many([{"_id": "alice", "balance": 100}, {"_id": "bob", "balance": 5}])
    with client.start_session(snapshot=True) as session:
        assert ledger.find_one({"_id": "alice"}, session=session)["balance"] == 100
        ledger.update_one({"_id": "alice"}, {"$set": {"balance": 0}})
        ledger.delete_one({"_id": "bob"})
        seen = {d["_id"]: d["balance"] for d in ledger.find({}, session=session)}
        assert seen == {"alice": 100, "bob": 5}
        on_secondary = ledger.with_options(read_preference=ReadPreference.SECONDARY)
        wait_until(lambda: on_secondary.find_one({"_id": "bob"}) is None, 10, "replicated")
    assert {d["_id"]: d["balance"] for d in ledger.find()} == {"alice": 0}
