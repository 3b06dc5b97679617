"""CRUD features of the emulator as pymongo sees them on a real rs3: indexes and unique keys,
pipeline-style updates, `$expr` with `let`, arrayFilters, `$out` / `$merge` and
database-level aggregation."""

from __future__ import annotations

from typing import Any

import pytest
from pymongo.errors import DuplicateKeyError, OperationFailure, WriteError
from pymongo.read_concern import ReadConcern

from rsdrill.sandbox.cluster import Sandbox
from tests.harness.members import wait_until, writable_primary


@pytest.fixture
def rs3(replset: Any) -> Sandbox:
    return replset("rs3")


def test_unique_index_is_enforced_listed_replicated_and_dropped(
    rs3: Sandbox, client_for: Any
) -> None:
    coll = client_for(rs3, w="majority").crud.people
    coll.insert_many([{"_id": 1, "email": "a@x"}, {"_id": 2, "email": "b@x"}])
    assert coll.create_index("email", unique=True) == "email_1"
    with pytest.raises(DuplicateKeyError) as info:
        coll.insert_one({"_id": 3, "email": "a@x"})
    assert info.value.details["keyPattern"] == {"email": 1}
    assert info.value.details["keyValue"] == {"email": "a@x"}
    with pytest.raises(DuplicateKeyError):
        coll.update_one({"_id": 2}, {"$set": {"email": "a@x"}})
    with pytest.raises(DuplicateKeyError):
        coll.find_one_and_update({"_id": 9}, {"$set": {"email": "b@x"}}, upsert=True)
    coll.update_one({"_id": 2}, {"$set": {"email": "c@x", "n": 1}})  # its own key: no clash
    assert [i["name"] for i in coll.list_indexes()] == ["_id_", "email_1"]
    # A unique index cannot be built over duplicates.
    coll.insert_one({"_id": 4, "email": "d@x", "team": 1})
    coll.insert_one({"_id": 5, "email": "e@x", "team": 1})
    with pytest.raises(OperationFailure) as built:
        coll.create_index("team", unique=True)
    assert built.value.code == 11000

    primary = writable_primary(rs3)
    assert primary is not None
    secondary = next(m for m in rs3.spec.members if m.host != primary.host)
    on_secondary = client_for(secondary.host, readPreference="secondaryPreferred").crud.people
    wait_until(
        lambda: "email_1" in on_secondary.index_information(), 10, "the index on a secondary"
    )
    coll.drop_index("email_1")
    coll.insert_one({"_id": 6, "email": "a@x"})
    assert list(coll.index_information()) == ["_id_"]
    with pytest.raises(OperationFailure) as missing:
        coll.drop_index("nope_1")
    assert missing.value.code == 27
    # returnKey: each document as the key of the index the find reads; {} from a collection
    # scan (no index on n).
    coll.create_index("email")
    assert list(coll.find({"email": "a@x"}, return_key=True)) == [{"email": "a@x"}] * 2
    assert list(coll.find({}, sort=[("_id", 1)], limit=2, return_key=True)) == [
        {"_id": 1},
        {"_id": 2},
    ]
    assert list(coll.find({"n": 1}, return_key=True)) == [{}]


def test_pipeline_updates_expr_let_and_array_filters(rs3: Sandbox, client_for: Any) -> None:
    coll = client_for(rs3).crud.items
    coll.insert_many(
        [{"_id": 1, "a": 1, "b": 1, "y": [{"b": 3}, {"b": 1}]}, {"_id": 2, "a": 1, "b": 2}]
    )
    assert [d["_id"] for d in coll.find({"$expr": {"$eq": ["$a", "$b"]}})] == [1]
    assert [d["_id"] for d in coll.find({"$expr": {"$eq": ["$_id", "$$id"]}}, let={"id": 2})] == [2]
    result = coll.update_one(
        {"_id": 2},
        [{"$set": {"sum": {"$add": ["$a", "$b", "$$k"]}}}, {"$unset": "a"}],
        let={"k": 10},
    )
    assert result.modified_count == 1
    assert coll.find_one({"_id": 2}) == {"_id": 2, "b": 2, "sum": 13}
    coll.update_one({"_id": 1}, {"$set": {"y.$[big].b": 0}}, array_filters=[{"big.b": {"$gt": 2}}])
    assert coll.find_one({"_id": 1})["y"] == [{"b": 0}, {"b": 1}]
    assert (
        coll.delete_many({"$expr": {"$gt": ["$sum", "$$lim"]}}, let={"lim": 12}).deleted_count == 1
    )


def test_out_merge_and_database_aggregate(rs3: Sandbox, client_for: Any) -> None:
    db = client_for(rs3, w="majority").crud
    db.src.insert_many([{"_id": i, "x": i * 11} for i in (1, 2, 3)])
    assert list(db.src.aggregate([{"$match": {"_id": {"$gt": 1}}}, {"$out": "copy"}])) == []
    assert list(db.copy.find()) == [{"_id": 2, "x": 22}, {"_id": 3, "x": 33}]
    db.src.aggregate([{"$match": {"_id": 1}}, {"$set": {"y": 1}}, {"$merge": {"into": "copy"}}])
    assert db.copy.count_documents({}) == 3
    docs = list(db.aggregate([{"$documents": [{"_id": 2, "z": 1}]}, {"$merge": "copy"}]))
    assert docs == []
    assert db.copy.find_one({"_id": 2}) == {"_id": 2, "x": 22, "z": 1}
    with pytest.raises(OperationFailure) as failed:
        merge = {"into": "copy", "whenMatched": "fail"}
        db.aggregate([{"$documents": [{"_id": 3}]}, {"$merge": merge}])
    assert failed.value.code == 11000
    assert failed.value.details["keyValue"] == {"_id": 3}
    # On a secondary (as mongod 5.0+) the pipeline runs there and the primary writes.
    primary = writable_primary(rs3)
    assert primary is not None
    secondary = next(m for m in rs3.spec.members if m.host != primary.host)
    direct = client_for(secondary.host, readPreference="secondaryPreferred").crud
    wait_until(lambda: direct.src.count_documents({}) == 3, 10, "the secondary to catch up")
    assert list(direct.src.aggregate([{"$match": {"_id": 3}}, {"$out": "from_secondary"}])) == []
    assert list(db.from_secondary.find()) == [{"_id": 3, "x": 33}]
    with pytest.raises(OperationFailure) as linearizable:
        db.src.with_options(read_concern=ReadConcern("linearizable")).aggregate([{"$out": "never"}])
    assert linearizable.value.code == 72
    sessions = list(db.client.admin.aggregate([{"$listLocalSessions": {}}]))
    assert sessions and "id" in sessions[0]["_id"]


def test_views_read_through_their_pipeline_and_refuse_writes(replset: Any, client_for: Any) -> None:
    db = client_for(replset("rs1")).crud
    db.src.insert_many([{"_id": i, "x": i} for i in (1, 2, 3)])
    db.create_collection("big", viewOn="src", pipeline=[{"$match": {"x": {"$gt": 1}}}])
    db.create_collection("bigger", viewOn="big", pipeline=[{"$set": {"y": {"$add": ["$x", 1]}}}])
    assert db.big.estimated_document_count() == 2
    assert list(db.bigger.find({"y": 4})) == [{"_id": 3, "x": 3, "y": 4}]
    assert list(db.big.aggregate([{"$count": "n"}])) == [{"n": 2}]
    assert db.big.distinct("x") == [2, 3]
    info = {c["name"]: c for c in db.list_collections()}
    assert info["big"]["type"] == "view"
    assert info["big"]["options"] == {"viewOn": "src", "pipeline": [{"$match": {"x": {"$gt": 1}}}]}
    with pytest.raises(OperationFailure) as refused:
        db.big.insert_one({"_id": 9})
    assert refused.value.code == 166
    db.big.drop()
    assert "big" not in db.list_collection_names()


def test_opcounters_count_crud_by_kind_and_only_other_commands_as_command(
    replset: Any, client_for: Any
) -> None:
    """As mongod: find, getMore, insert, update and delete raise their own counter only (their
    shouldAffectCommandCounter is false); aggregate and serverStatus are commands, once each."""
    rs1 = replset("rs1")
    # Polled, a minute apart: streamed, pymongo starts an RTT monitor after its first check, whose
    # own handshake and hello (two commands) could land between the two serverStatus calls.
    client = client_for(
        rs1.spec.members[0].host, heartbeatFrequencyMS=60_000, serverMonitoringMode="poll"
    )
    coll = client.ops.c
    coll.insert_one({"_id": 0})  # the connection's handshake and the collection, beforehand
    before = client.admin.command("serverStatus")["opcounters"]
    coll.insert_many([{"_id": 1}, {"_id": 2}, {"_id": 3}])
    assert len(list(coll.find({}, batch_size=2))) == 4  # one find and one getMore
    coll.find_one({"_id": 1})
    coll.update_one({"_id": 1}, {"$set": {"a": 1}})
    coll.delete_one({"_id": 2})
    assert list(coll.aggregate([{"$count": "n"}])) == [{"n": 3}]
    after = client.admin.command("serverStatus")["opcounters"]
    delta = {key: after[key] - before[key] for key in before}
    assert {k: delta[k] for k in ("insert", "query", "getmore", "update", "delete")} == {
        "insert": 3, "query": 2, "getmore": 1, "update": 1, "delete": 1,
    }, delta  # fmt: skip
    assert delta["command"] == 2, delta  # aggregate and this serverStatus


def test_a_secondarys_oplog_fetches_count_as_getmores_on_its_source(
    rs3: Sandbox, client_for: Any
) -> None:
    """mongod's secondaries fetch with getMores on the oplog cursor: the writes' replication
    shows under getmore, not as commands."""
    primary = wait_until(lambda: writable_primary(rs3), 10, "a primary")
    on_primary = client_for(primary.host, heartbeatFrequencyMS=60_000)
    coll = client_for(rs3, w="majority").ops.c
    coll.insert_one({"_id": 0})
    before = on_primary.admin.command("serverStatus")["opcounters"]
    for n in range(1, 6):
        coll.insert_one({"_id": n})  # acknowledged once a secondary has fetched it
    after = on_primary.admin.command("serverStatus")["opcounters"]
    assert after["insert"] - before["insert"] == 5
    assert after["getmore"] - before["getmore"] >= 5, (before, after)


def test_a_validator_refuses_documents_it_does_not_match_as_mongod_does(
    rs3: Sandbox, client_for: Any
) -> None:
    db = client_for(rs3, w="majority").valid
    validator = {"age": {"$type": "int"}}
    db.create_collection("people", validator=validator)
    people = db.people
    with pytest.raises(WriteError) as refused:
        people.insert_one({"_id": 1, "age": "old"})
    assert refused.value.code == 121
    assert refused.value.details["errInfo"]["failingDocumentId"] == 1
    people.insert_one({"_id": 2, "age": 40})
    with pytest.raises(WriteError):
        people.update_one({"_id": 2}, {"$set": {"age": "forty"}})
    with pytest.raises(WriteError):
        people.update_one({"_id": 9}, {"$set": {"age": "nine"}}, upsert=True)
    with pytest.raises(OperationFailure) as modify:  # findAndModify: the command's error
        people.find_one_and_update({"_id": 2}, {"$set": {"age": "forty"}})
    assert modify.value.code == 121
    people.insert_one({"_id": 3, "age": "old"}, bypass_document_validation=True)
    assert people.count_documents({}) == 2
    # moderate: a document that already failed may still change; a valid one may not fail.
    db.command("collMod", "people", validationLevel="moderate")
    people.update_one({"_id": 3}, {"$set": {"name": "x"}})
    with pytest.raises(WriteError):
        people.update_one({"_id": 2}, {"$set": {"age": "forty"}})
    # warn: written (mongod logs a warning).
    db.command("collMod", "people", validationAction="warn")
    people.update_one({"_id": 2}, {"$set": {"age": "forty"}})
    expected = {"validator": validator, "validationLevel": "moderate", "validationAction": "warn"}
    assert next(db.list_collections(filter={"name": "people"}))["options"] == expected
    # Replicated with the collection: a secondary has the same options.
    primary = writable_primary(rs3)
    assert primary is not None
    secondary = next(m for m in rs3.spec.members if m.host != primary.host)
    on_secondary = client_for(secondary.host, readPreference="secondaryPreferred").valid
    wait_until(
        lambda: (
            next(on_secondary.list_collections(filter={"name": "people"}))["options"] == expected
        ),
        10,
        "the validator on a secondary",
    )
    # Refused when set, not accepted and never enforced.
    with pytest.raises(OperationFailure) as schema:
        db.create_collection("schema", validator={"$jsonSchema": {"required": ["a"]}})
    assert schema.value.code == 72
    with pytest.raises(OperationFailure) as level:
        db.command("collMod", "people", validationLevel="sometimes")
    assert level.value.code == 2
