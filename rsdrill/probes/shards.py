"""A sharded target's writes per shard, through its routers: one probe collection sharded on
`_id` with one chunk on each shard ([i * ID_STEP, (i+1) * ID_STEP) on the i-th shard), and a
write loop per shard inserting into its own chunk. Each op says which shard it meant
(`history.shard_write_probe`), so a result says which shard was interrupted and for how long.

The chunks are placed before the measured window by MongoDB's own commands (`shardCollection`,
`split`, `moveChunk`), as an operator would; nothing moves them during the run (the sandbox's
balancer leaves the collection alone), so a probe's keys stay on its shard.
"""

from __future__ import annotations

from typing import Any

from pymongo import MongoClient
from pymongo.database import Database

from rsdrill.probes.availability import PROBE_DB

ID_STEP = 1 << 40
"""Each shard's range of `_id`s: far more than a run's inserts."""


# A ledger writing every 20 ms is about 400 seqs in when the balancer's first round (10 s
# after the routers start) moves the lowest chunk: the one it is writing into, so the first
# migration catches up live writes.
LEDGER_CHUNK_SEQS = 500
LEDGER_CHUNKS = 8


def chunks_to_balance(uri: str, collection: str) -> None:
    """Shard the ledger's `collection` on `_id` in LEDGER_CHUNKS chunks of LEDGER_CHUNK_SEQS
    seqs (the last open-ended), all on its database's primary shard: the balancer, when on,
    moves them while the ledger writes into them, so its read-back checks acknowledged writes
    through chunk migrations."""
    ns = f"{PROBE_DB}.{collection}"
    client: MongoClient[dict[str, Any]]
    with MongoClient(uri, serverSelectionTimeoutMS=30_000) as client:
        admin: Database[dict[str, Any]] = client.admin
        admin.command("shardCollection", ns, key={"_id": 1})
        for i in range(1, LEDGER_CHUNKS):
            admin.command("split", ns, middle={"_id": i * LEDGER_CHUNK_SEQS})


def spread_over_shards(uri: str, collection: str) -> None:
    """Shard `collection` on a hashed `_id` (MongoDB places its initial chunks on every shard),
    left alone by the balancer: a transaction of a few keys then often writes on several
    shards, so its commit is MongoDB's two-phase commit."""
    ns = f"{PROBE_DB}.{collection}"
    client: MongoClient[dict[str, Any]]
    with MongoClient(uri, serverSelectionTimeoutMS=30_000) as client:
        admin: Database[dict[str, Any]] = client.admin
        admin.command("shardCollection", ns, key={"_id": "hashed"})
        admin.command("configureCollectionBalancing", ns, enableBalancing=False)


def place_chunks(uri: str, collection: str, shards: list[str]) -> dict[str, int]:
    """Shard `collection` on `_id` with one chunk per shard; each shard's first `_id`."""
    ns = f"{PROBE_DB}.{collection}"
    client: MongoClient[dict[str, Any]]
    with MongoClient(uri, serverSelectionTimeoutMS=30_000) as client:
        admin: Database[dict[str, Any]] = client.admin
        admin.command("shardCollection", ns, key={"_id": 1})
        # Each probe's keys stay on its shard: the balancer leaves this collection alone.
        admin.command("configureCollectionBalancing", ns, enableBalancing=False)
        for i in range(1, len(shards)):
            admin.command("split", ns, middle={"_id": i * ID_STEP})
        for i, shard in enumerate(shards):
            admin.command("moveChunk", ns, find={"_id": i * ID_STEP}, to=shard)
    return {shard: i * ID_STEP for i, shard in enumerate(shards)}
