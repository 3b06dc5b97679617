"""dbHash on the emulator as mongod computes it, checked against hashes computed here with
pymongo's own `bson` from the documents the test wrote: per collection the MD5 of each
document's BSON in `_id` order (BSON comparison order across types), for the database the MD5
of the collections' digests in name order; equal on every member once they have replicated."""

from __future__ import annotations

import datetime as dt
import hashlib
from typing import Any

import bson
import pytest
from bson import ObjectId
from pymongo.errors import OperationFailure

from rsdrill.sandbox.cluster import Sandbox
from tests.harness.members import wait_until

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
