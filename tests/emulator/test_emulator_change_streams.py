"""Change streams on the emulator as pymongo uses them: events, resume tokens, and a stream
that goes on across a failover without losing or repeating an event."""

from __future__ import annotations

from typing import Any

import pytest
from pymongo import monitoring
from pymongo.errors import OperationFailure
from pymongo.read_concern import ReadConcern

from rsdrill.sandbox.cluster import Sandbox
from tests.harness.members import member_state, wait_until, writable_primary


def _next_events(stream: Any, count: int, timeout: float = 20.0) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []

    def more() -> bool:
        change = stream.try_next()
        if change is not None:
            events.append(change)
        return len(events) >= count

    wait_until(more, timeout, f"{count} change events", poll=0)
    return events


def test_events_resume_tokens_and_invalidate(replset: Any, client_for: Any) -> None:
    sandbox: Sandbox = replset("rs3")
    coll = client_for(sandbox, w="majority").cs.items
    with coll.watch(max_await_time_ms=200) as stream:
        coll.insert_one({"_id": 1, "x": 1})
        coll.update_one({"_id": 1}, {"$set": {"x": 2}})
        coll.delete_one({"_id": 1})
        events = _next_events(stream, 3)
        token = events[0]["_id"]
    assert [e["operationType"] for e in events] == ["insert", "update", "delete"]
    assert events[0]["fullDocument"] == {"_id": 1, "x": 1}
    assert events[1]["updateDescription"]["updatedFields"] == {"x": 2}
    assert events[2]["documentKey"] == {"_id": 1}
    assert events[0]["ns"] == {"db": "cs", "coll": "items"}
    # Resuming after the first event replays the rest, and nothing before it.
    with coll.watch(full_document="updateLookup", max_await_time_ms=200) as lookup:
        coll.insert_one({"_id": 5})
        coll.replace_one({"_id": 5}, {"y": 1})
        coll.update_one({"_id": 5}, {"$set": {"y": 2}})
        _, replaced, updated = _next_events(lookup, 3)
    assert (replaced["operationType"], replaced["fullDocument"]) == ("replace", {"_id": 5, "y": 1})
    assert updated["fullDocument"] == {"_id": 5, "y": 2}
    with coll.watch(resume_after=token, max_await_time_ms=200) as resumed:
        assert [e["_id"] for e in _next_events(resumed, 2)] == [e["_id"] for e in events[1:]]
    with coll.watch([{"$match": {"operationType": "insert"}}], max_await_time_ms=200) as only:
        coll.insert_one({"_id": 2})
        coll.delete_one({"_id": 2})
        coll.insert_one({"_id": 3})
        assert [e["documentKey"]["_id"] for e in _next_events(only, 2)] == [2, 3]
    with coll.watch(max_await_time_ms=200) as everything:
        coll.drop()
        drop, invalidate = _next_events(everything, 2)
    assert (drop["operationType"], invalidate["operationType"]) == ("drop", "invalidate")
    with pytest.raises(OperationFailure) as bad:
        coll.watch(resume_after={"_data": "nonsense"})
    assert bad.value.code == 260


def test_stream_survives_a_failover(replset: Any, client_for: Any) -> None:
    sandbox: Sandbox = replset("rs3")
    client = client_for(sandbox, w="majority")
    coll = client.cs.items
    with client.cs.watch(max_await_time_ms=200) as stream:
        coll.insert_one({"_id": "before"})
        assert _next_events(stream, 1)[0]["documentKey"] == {"_id": "before"}
        old = writable_primary(sandbox)
        assert old is not None
        client_for(old.host).admin.command("replSetStepDown", 10, secondaryCatchUpPeriodSecs=5)
        wait_until(
            lambda: (new := writable_primary(sandbox)) is not None and new.host != old.host,
            30,
            "a new primary",
        )
        coll.insert_one({"_id": "after"})
        events = _next_events(stream, 1)
    assert [e["documentKey"]["_id"] for e in events] == ["after"]


class _Commands(monitoring.CommandListener):
    """The names of the commands a client started, in order."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.names.append(event.command_name)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def test_a_streams_own_resumable_error_is_labeled_and_a_fail_commands_is_not(
    replset: Any, client_for: Any
) -> None:
    # As the change-streams spec tests check on mongod: the getMore that fails once its cursor is
    # found (failGetMoreAfterCursorCheckout) carries ResumableChangeStreamError for a resumable
    # code, so pymongo resumes with a new aggregate; failCommand's error, raised before the
    # cursor is known, has only the labels its data gives, so the same code ends the stream.
    sandbox: Sandbox = replset("rs3")
    listener = _Commands()
    coll = client_for(sandbox, w="majority", event_listeners=[listener]).cs.resumable
    admin = client_for(sandbox).admin
    fail_point = {"mode": {"times": 1}, "data": {"errorCode": 189, "closeConnection": False}}
    admin.command({"configureFailPoint": "failGetMoreAfterCursorCheckout", **fail_point})
    with coll.watch(max_await_time_ms=200) as stream:
        coll.insert_one({"_id": 1})
        assert _next_events(stream, 1)[0]["documentKey"] == {"_id": 1}
    assert listener.names.count("aggregate") == 2, listener.names  # resumed once
    admin.command({"configureFailPoint": "failCommand", "mode": {"times": 1},
                   "data": {"failCommands": ["getMore"], "errorCode": 6}})  # fmt: skip
    with coll.watch(max_await_time_ms=200) as stream, pytest.raises(OperationFailure) as ended:
        coll.insert_one({"_id": 2})
        stream.try_next()  # the first getMore fails
    assert (ended.value.code, ended.value.details["codeName"]) == (6, "HostUnreachable")
    assert not ended.value.has_error_label("ResumableChangeStreamError")


def test_batches_drops_and_invalidates_as_mongod_gives_them(replset: Any, client_for: Any) -> None:
    sandbox: Sandbox = replset("rs3")
    client = client_for(sandbox, w="majority")
    db = client.cs_batches
    # Small batches: each event once, however the batches cut them.
    with db.items.watch(batch_size=2, max_await_time_ms=200) as stream:
        db.items.insert_many([{"_id": i} for i in range(10)])
        got = [e["documentKey"]["_id"] for e in _next_events(stream, 10)]
        assert stream.try_next() is None
    assert got == list(range(10))
    # A database's drop: a drop per collection, then dropDatabase, then invalidate.
    db.other.insert_one({"_id": 1})
    with db.watch(max_await_time_ms=200) as stream:
        client.drop_database(db.name)
        events = _next_events(stream, 4)
    kinds = [e["operationType"] for e in events]
    assert kinds == ["drop", "drop", "dropDatabase", "invalidate"], kinds
    assert {e["ns"]["coll"] for e in events[:2]} == {"items", "other"}
    # An invalidate's token: resumeAfter refuses it, startAfter starts after it.
    with db.items.watch(max_await_time_ms=200) as stream:
        db.items.drop()
        db.items.insert_one({"_id": "x"})
        db.items.drop()
        *_, invalidate = _next_events(stream, 3)
    assert invalidate["operationType"] == "invalidate"
    with pytest.raises(OperationFailure) as refused:
        db.items.watch(resume_after=invalidate["_id"])
    assert refused.value.code == 260
    with db.items.watch(start_after=invalidate["_id"], max_await_time_ms=200) as stream:
        db.items.insert_one({"_id": "after"})
        assert _next_events(stream, 1)[0]["documentKey"] == {"_id": "after"}
    # A stream reads majority-committed entries only, and says so to any other read concern.
    local = db.get_collection("items", read_concern=ReadConcern("local"))
    with pytest.raises(OperationFailure) as wrong:
        local.watch()
    assert wrong.value.code == 72


def test_pre_and_post_images_when_the_collection_keeps_them(replset: Any, client_for: Any) -> None:
    sandbox: Sandbox = replset("rs3")
    client = client_for(sandbox, w="majority")
    db = client.cs_images
    db.create_collection("kept", changeStreamPreAndPostImages={"enabled": True})
    db.plain.insert_one({"_id": 1, "x": 0})
    db.kept.insert_one({"_id": 1, "x": 0})
    images = {"full_document": "whenAvailable", "full_document_before_change": "whenAvailable"}
    with db.watch(max_await_time_ms=200, **images) as stream:
        for coll in (db.plain, db.kept):
            coll.update_one({"_id": 1}, {"$set": {"x": 1}})
            coll.replace_one({"_id": 1}, {"x": 2})
            coll.delete_one({"_id": 1})
        plain, kept = _next_events(stream, 3), _next_events(stream, 3)
    # The images as of each event, not the document now (updateLookup's).
    assert [e.get("fullDocumentBeforeChange") for e in kept] == [
        {"_id": 1, "x": 0}, {"_id": 1, "x": 1}, {"_id": 1, "x": 2}]  # fmt: skip
    assert [e.get("fullDocument") for e in kept[:2]] == [{"_id": 1, "x": 1}, {"_id": 1, "x": 2}]
    assert [e.get("fullDocumentBeforeChange", "absent") for e in plain] == [None, None, None]
    assert plain[0]["fullDocument"] is None
    # Off (the default): no field; required where none was kept: the stream fails.
    with db.plain.watch(max_await_time_ms=200) as stream:
        db.plain.insert_one({"_id": 2})
        db.plain.delete_one({"_id": 2})
        assert "fullDocumentBeforeChange" not in _next_events(stream, 2)[1]
    with db.plain.watch(full_document_before_change="required", max_await_time_ms=200) as stream:
        db.plain.insert_one({"_id": 3})
        db.plain.delete_one({"_id": 3})
        with pytest.raises(OperationFailure) as missing:
            for _ in range(20):
                stream.try_next()
    assert missing.value.code == 47
    # collMod turns them on for a collection that has none; the option replicates, so a
    # secondary's copy keeps images too (a stream after a failover finds them).
    with db.plain.watch(show_expanded_events=True, max_await_time_ms=200) as expanded:
        db.command("collMod", "plain", changeStreamPreAndPostImages={"enabled": True})
        [modify] = _next_events(expanded, 1)
    assert modify["operationType"] == "modify"
    assert modify["operationDescription"] == {"changeStreamPreAndPostImages": {"enabled": True}}
    info = {c["name"]: c["options"] for c in db.list_collections()}
    assert info["plain"] == {"changeStreamPreAndPostImages": {"enabled": True}}

    def options_on(host: str) -> list[Any]:
        listed = client_for(host).cs_images.list_collections(filter={"name": "plain"})
        return [c["options"] for c in listed]

    for member in sandbox.spec.members:
        wait_until(lambda h=member.host: options_on(h) == [info["plain"]], 10, member.host)
    # A member that starts empty copies the option with the collection (initial sync); the
    # write after collMod keeps its entry out of the oplog the sync replays.
    db.plain.insert_one({"_id": 4})
    secondary = next(m for m in sandbox.spec.members if member_state(m.host) == "SECONDARY")
    sandbox.kill(secondary)
    sandbox.start(secondary, wipe=True)
    wait_until(lambda: member_state(secondary.host) == "SECONDARY", 30, "the resynced member")
    assert options_on(secondary.host) == [info["plain"]]
    with pytest.raises(OperationFailure) as refused:
        db.command("collMod", "plain", cappedSize=4096)
    assert refused.value.code == 72 and "cappedSize" in str(refused.value)


def test_a_transactions_writes_are_events_and_a_stream_resumes_inside_it(
    replset: Any, client_for: Any
) -> None:
    sandbox: Sandbox = replset("rs3")
    client = client_for(sandbox, w="majority")
    coll = client.cs_txn.items
    coll.insert_one({"_id": "before"})
    with coll.watch(batch_size=1, max_await_time_ms=200) as stream:
        with client.start_session() as session, session.start_transaction():
            coll.insert_one({"_id": "a"}, session=session)
            coll.update_one({"_id": "before"}, {"$set": {"x": 1}}, session=session)
            coll.delete_one({"_id": "a"}, session=session)
        events = _next_events(stream, 3)
    assert [e["operationType"] for e in events] == ["insert", "update", "delete"]
    assert len({e["_id"]["_data"] for e in events}) == 3
    assert all("lsid" in e and e["txnNumber"] == events[0]["txnNumber"] for e in events)
    # Resumed after the transaction's first event: its other two, once each.
    with coll.watch(resume_after=events[0]["_id"], max_await_time_ms=200) as resumed:
        rest = _next_events(resumed, 2)
        assert resumed.try_next() is None
    assert [e["_id"] for e in rest] == [e["_id"] for e in events[1:]]


def test_a_rename_moves_the_collection_and_ends_its_stream(replset: Any, client_for: Any) -> None:
    sandbox: Sandbox = replset("rs3")
    client = client_for(sandbox, w="majority")
    db = client.cs_rename
    db.source.insert_many([{"_id": 1}, {"_id": 2}])
    db.source.create_index("x")
    db.target.insert_one({"_id": "old"})
    with db.source.watch(max_await_time_ms=200) as stream, db.watch(max_await_time_ms=200) as whole:
        with pytest.raises(OperationFailure) as exists:
            db.source.rename("target")
        assert exists.value.code == 48
        db.source.rename("target", dropTarget=True)
        rename, invalidate = _next_events(stream, 2)
        [in_database] = _next_events(whole, 1)
    assert rename["operationType"] == "rename" and invalidate["operationType"] == "invalidate"
    assert (rename["ns"], rename["to"]) == (
        {"db": "cs_rename", "coll": "source"}, {"db": "cs_rename", "coll": "target"})  # fmt: skip
    assert in_database["operationType"] == "rename"  # a database's stream goes on
    assert sorted(d["_id"] for d in db.target.find()) == [1, 2]
    assert "x_1" in db.target.index_information()
    assert "source" not in db.list_collection_names()
    # Every member renamed it (the entry replicates).
    for member in sandbox.spec.members:
        wait_until(
            lambda h=member.host: client_for(h).cs_rename.target.count_documents({}) == 2,
            10,
            member.host,
        )
    with pytest.raises(OperationFailure) as missing:
        db.source.rename("other")
    assert missing.value.code == 26
