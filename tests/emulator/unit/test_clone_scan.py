"""A sync source serves an initial sync's clone in batches (`DataStore.scan`): every document of
the collection once, in natural order, and each batch costs what it returns, not what the
collection holds (the source's event loop serves the writes between batches)."""

from __future__ import annotations

from pathlib import Path

import bson

from rsdrill_emulator.datastore import DataStore
from rsdrill_emulator.storage import Database

NS = "app.records"
OTHER = "app.other"


def store_with(tmp_path: Path, records: int) -> DataStore:
    database = Database(tmp_path / f"data{records}")
    database.open()
    store = DataStore(database)
    for i in range(records):
        store.put(NS, {"_id": i, "pad": "x" * 200})
        if i % 3 == 0:  # another collection's rows interleaved with this one's
            store.put(OTHER, {"_id": i})
    database.commit()
    return store


def batches(store: DataStore, max_bytes: int) -> list[list[bytes]]:
    out, position, done = [], 0, False
    while not done:
        docs, position, done = store.scan(NS, position, max_bytes)
        out.append(docs)
    return out


def vm_steps(store: DataStore, after: int, max_bytes: int) -> int:
    """SQLite virtual-machine steps one batch takes (counted in hundreds)."""
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0

    store.database.db.set_progress_handler(count, 100)
    try:
        store.scan(NS, after, max_bytes)
    finally:
        store.database.db.set_progress_handler(None, 0)
    return steps


def test_batches_return_every_document_once_in_natural_order(tmp_path: Path) -> None:
    store = store_with(tmp_path, 500)
    store.put(NS, {"_id": 7, "pad": "replaced"})  # a replaced document keeps its place
    got = [bson.decode(doc) for batch in batches(store, 4096) for doc in batch]
    assert [doc["_id"] for doc in got] == list(range(500))
    assert got[7]["pad"] == "replaced"


def test_a_batch_costs_what_it_returns_not_the_collection(tmp_path: Path) -> None:
    small, large = store_with(tmp_path, 1000), store_with(tmp_path, 16000)
    # A batch of about 20 documents from the middle of each collection.
    cost_small = vm_steps(small, 500, 4096)
    cost_large = vm_steps(large, 8000, 4096)
    assert cost_large < 2 * cost_small + 10, (cost_small, cost_large)
