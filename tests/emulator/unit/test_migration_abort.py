"""What an aborted migration deletes on the recipient: every document it sent there, a batch
that a new primary of the recipient took included (the migration learns of the new primary from
that batch's answer, after the write, and aborts). The shards here are stand-ins answering the
router's commands; tests/emulator/test_migration_faults.py runs the same against real sets."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from bson.timestamp import Timestamp

from rsdrill_emulator.errors import CommandError
from rsdrill_emulator.router.migration import Migration
from rsdrill_emulator.router.routing import Chunk, CollectionRoute


class _Shard:
    """A shard's set as the router sees it: the primary its answers come from, and every
    command sent, by host. Finds answer from `docs` (the collection) and `oplog`."""

    def __init__(self, primary: str, docs: list[dict[str, Any]] | None = None) -> None:
        self.primary = primary
        self.docs = docs or []
        self.oplog: list[dict[str, Any]] = [{"ts": Timestamp(1, 0)}]
        self.sent: list[tuple[str, dict[str, Any]]] = []

    async def on_primary(self, db: str, cmd: dict[str, Any], retry: bool) -> tuple[
            str, dict[str, Any]]:  # fmt: skip
        self.sent.append((self.primary, cmd))
        if "find" not in cmd:
            return self.primary, {"ok": 1.0}
        if cmd["find"] == "oplog.rs":
            found = self.oplog[-1:] if cmd.get("limit") else self.oplog[1:]
        else:
            wanted = cmd["filter"].get("_id", {}).get("$in")
            found = [d for d in self.docs if wanted is None or d["_id"] in wanted]
        return self.primary, {"ok": 1.0, "cursor": {"id": 0, "firstBatch": found}}

    def deleted(self) -> list[tuple[str, Any]]:
        return [(host, s["q"]["_id"]) for host, cmd in self.sent if "delete" in cmd
                for s in cmd["deletes"]]  # fmt: skip


class _Router:
    def __init__(self, shards: dict[str, _Shard]) -> None:
        self.shards = shards

    def shard(self, name: str) -> _Shard:
        return self.shards[name]


def test_a_batch_a_new_recipient_primary_took_is_deleted_by_the_abort() -> None:
    donor = _Shard("d1:27017", docs=[{"_id": 1, "k": 600}, {"_id": 2, "k": 100}])
    recipient = _Shard("r1:27017")
    route = CollectionRoute("app.c", {"k": 1}, uuid=None)
    chunk = Chunk({"k": 500}, {"k": {"$maxKey": 1}}, "a", Timestamp(1, 0))
    route.chunks = [Chunk({"k": {"$minKey": 1}}, {"k": 500}, "a", Timestamp(1, 1)), chunk]
    migration = Migration(_Router({"a": donor, "b": recipient}), route, chunk, "b")  # type: ignore[arg-type]

    async def migrate() -> None:
        await migration.clone()  # _id 1 (k 600 is in the range; k 100 is not)
        donor.docs.append({"_id": 3, "k": 700})  # a write during the migration
        donor.oplog.append({"ts": Timestamp(2, 0), "ns": "app.c", "o": {"_id": 3}})
        recipient.primary = "r2:27017"  # the recipient's primary lost its place
        with pytest.raises(CommandError, match="primary changed"):
            await migration.catch_up()
        await migration.abort()

    asyncio.run(migrate())
    written = [(host, cmd["updates"][0]["q"]["_id"]) for host, cmd in recipient.sent
               if "update" in cmd]  # fmt: skip
    assert written == [("r1:27017", 1), ("r2:27017", 3)]
    # Both copies are deleted, on the primary the recipient has now.
    assert sorted(recipient.deleted()) == [("r2:27017", 1), ("r2:27017", 3)]
