"""dbHash on the emulator as mongod computes it, checked against hashes computed here with
pymongo's own `bson` from the documents the test wrote: per collection the MD5 of each
document's BSON in `_id` order (BSON comparison order across types), for the database the MD5
of the collections' digests in name order; equal on every member once they have replicated."""

from __future__ import annotations

import datetime as dt
import hashlib
import sqlite3
import uuid
from typing import Any

import bson
import pytest
from bson import ObjectId
from pymongo.errors import CollectionInvalid, OperationFailure

from rsdrill.sandbox.cluster import Sandbox
from rsdrill.sandbox.config import DATA_FILE, member_dir
from rsdrill_emulator.datastore import id_key
from tests.harness.members import member_state, wait_until

# In BSON comparison order (numbers < strings < objects < arrays < ObjectId < booleans < dates):
# the order mongod's `_id` index walks, written out here, not asked of the server.
ORDERED_IDS: list[Any] = [
    -2.5, 1, 3, "a", "b", {"k": 1}, {"k": 2}, ObjectId("000000000000000000000001"), False, True,
    dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
]  # fmt: skip


def _digest(documents: list[dict[str, Any]]) -> str:
    md5 = hashlib.md5(usedforsecurity=False)
    for document in documents:
        md5.update(bson.encode(document))
    return md5.hexdigest()


@pytest.fixture
def rs3(replset: Any) -> Sandbox:
    return replset("rs3")


def test_db_hash_is_mongods_on_every_member(rs3: Sandbox, client_for: Any) -> None:
    client = client_for(rs3, w=3)
    db = client.audit
    documents = [{"_id": i, "n": n, "pad": "x" * n} for n, i in enumerate(ORDERED_IDS)]
    # Written out of order: the hash follows `_id`, not insertion.
    db.things.insert_many(documents[::-1])
    db.zebra.insert_one({"_id": 1, "z": True})
    db.create_collection("empty")
    db.command("create", "a_view", viewOn="things", pipeline=[])
    expected = {
        "empty": _digest([]),
        "things": _digest(documents),
        "zebra": _digest([{"_id": 1, "z": True}]),
    }
    whole = hashlib.md5(b"".join(expected[name].encode() for name in sorted(expected)),
                        usedforsecurity=False).hexdigest()  # fmt: skip
    for member in rs3.spec.members:

        def replies(host: str = member.host) -> dict[str, Any] | None:
            reply = client_for(host).audit.command("dbHash")
            return reply if reply["collections"] == expected else None

        reply = wait_until(replies, 10, f"{member.host}'s dbHash")
        assert reply["md5"] == whole and reply["host"] == member.host
        assert set(reply) >= {"collections", "capped", "uuids", "md5", "timeMillis"}
    only = client.audit.command("dbHash", collections=["zebra"])
    assert only["collections"] == {"zebra": expected["zebra"]}


def _uuids(client: Any, db: str) -> dict[str, Any]:
    # Binary subtype 4 as pymongo reads it by default (no uuidRepresentation set).
    return {c["name"]: c["info"]["uuid"].as_uuid() for c in client[db].list_collections()
            if c["type"] == "collection"}  # fmt: skip


def test_collection_uuids_are_the_primarys_on_every_member(rs3: Sandbox, client_for: Any) -> None:
    # As mongod's: given where a collection is created, carried by the oplog, so a secondary,
    # and a member that syncs from scratch, hold the same; dbHash names them; a rename keeps it.
    client = client_for(rs3, w=3)
    db = client.audit
    db.implicit.insert_one({"_id": 1})
    db.create_collection("explicit")
    db.by_index.create_index("k")  # createIndexes creates the collection
    db.command("create", "a_view", viewOn="implicit", pipeline=[])
    db.to_rename.insert_one({"_id": 1})
    before = _uuids(client, "audit")
    db.to_rename.rename("renamed")
    on_primary = _uuids(client, "audit")
    assert set(on_primary) == {"implicit", "explicit", "by_index", "renamed"}, on_primary
    assert all(isinstance(u, uuid.UUID) for u in on_primary.values())
    assert len(set(on_primary.values())) == 4 and on_primary["renamed"] == before["to_rename"]
    member = rs3.spec.members[-1]
    for m in rs3.spec.members:
        wait_until(lambda h=m.host: _uuids(client_for(h), "audit") == on_primary, 10, m.host)
        named = client_for(m.host).audit.command("dbHash")["uuids"]
        assert {name: u.as_uuid() for name, u in named.items()} == on_primary
    rs3.kill(member)
    rs3.start(member, wipe=True)  # an initial sync: the clone carries them too
    wait_until(lambda: member_state(member.host) == "SECONDARY", 60, "SECONDARY after resync")
    assert _uuids(client_for(member.host), "audit") == on_primary


def test_a_changed_document_changes_that_collection_only(rs3: Sandbox, client_for: Any) -> None:
    db = client_for(rs3, w=3).audit
    db.a.insert_many([{"_id": i} for i in range(5)])
    db.b.insert_many([{"_id": i} for i in range(5)])
    before = db.command("dbHash")
    db.b.update_one({"_id": 3}, {"$set": {"x": 1}})
    after = db.command("dbHash")
    assert after["collections"]["a"] == before["collections"]["a"]
    assert after["collections"]["b"] != before["collections"]["b"]
    assert after["md5"] != before["md5"]


def test_collections_must_be_names(rs3: Sandbox, client_for: Any) -> None:
    with pytest.raises(OperationFailure, match="collections entries have to be strings"):
        client_for(rs3).audit.command("dbHash", collections=[1])


def test_validate_answers_as_mongod_and_pymongo_reads_it(rs3: Sandbox, client_for: Any) -> None:
    db = client_for(rs3, w=3).audit
    db.things.insert_many([{"_id": i} for i in range(7)])
    db.things.create_index("n")
    # pymongo's own reading of the reply (it raises CollectionInvalid for a reply not valid).
    reply = db.validate_collection("things")
    assert reply["valid"] is True and reply["ns"] == "audit.things"
    assert reply["nrecords"] == 7 and reply["nIndexes"] == 2
    assert reply["keysPerIndex"] == {"_id_": 7, "n_1": 7}
    assert reply["errors"] == [] and reply["corruptRecords"] == []
    with pytest.raises(OperationFailure) as missing:
        db.validate_collection("nothing")
    assert missing.value.code == 26  # NamespaceNotFound
    db.command("create", "a_view", viewOn="things", pipeline=[])
    with pytest.raises(OperationFailure) as view:
        db.validate_collection("a_view")
    assert view.value.code == 166  # CommandNotSupportedOnView


def test_validate_finds_records_changed_in_a_stopped_members_storage(
    rs3: Sandbox, client_for: Any
) -> None:
    client = client_for(rs3, w=3)
    client.audit.things.insert_many([{"_id": i, "v": i} for i in range(5)])
    primary = client.admin.command("hello")["primary"]
    secondary = next(m for m in rs3.spec.members if m.host != primary)
    rs3.kill(secondary)
    data = sqlite3.connect(member_dir(rs3.directory, secondary) / "data" / DATA_FILE)
    with data:
        # One record cut short (not a whole BSON document), one whose `_id` is not its key.
        data.execute("UPDATE docs SET doc = ? WHERE ns = ? AND k = ?",
                     (bson.encode({"_id": 1})[:-3], "audit.things", id_key(1)))  # fmt: skip
        data.execute("UPDATE docs SET doc = ? WHERE ns = ? AND k = ?",
                     (bson.encode({"_id": 33, "v": 3}), "audit.things", id_key(3)))  # fmt: skip
    data.close()
    rs3.start(secondary)
    direct = client_for(secondary.host, readPreference="secondaryPreferred").audit
    with pytest.raises(CollectionInvalid):
        direct.validate_collection("things")
    reply = direct.command("validate", "things")
    assert reply["valid"] is False and reply["corruptRecords"] == [1]
    assert reply["nInvalidDocuments"] == 1 and len(reply["errors"]) == 2, reply
    assert [e["recordId"] for e in reply["missingIndexEntries"]] == [3]
    assert client_for(primary).audit.validate_collection("things")["valid"] is True
