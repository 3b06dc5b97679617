"""Point-in-time reads from the snapshot history, over a member's real data store."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from bson.timestamp import Timestamp

from rsdrill_emulator import snapshot
from rsdrill_emulator.datastore import DataStore, id_key
from rsdrill_emulator.oplog import make_entry
from rsdrill_emulator.snapshot import SnapshotHistory, SnapshotTooOld, SnapshotView
from rsdrill_emulator.storage import Database

NS = "bank.ledger"


@pytest.fixture
def store(tmp_path: Path) -> DataStore:
    database = Database(tmp_path / "data")
    database.open()
    return DataStore(database)


def _apply(history: SnapshotHistory, store: DataStore, entry: dict[str, Any]) -> None:
    history.before_apply(entry, store)
    store.apply(entry)


def _entry(inc: int, op: str, o: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return make_entry(op, NS, o, ts=Timestamp(100, inc), term=1, **extra)


def _ids(view: SnapshotView | DataStore) -> dict[Any, Any]:
    return {d["_id"]: d.get("v") for d in view.documents(NS)}


def test_a_view_shows_each_document_as_it_was_at_its_timestamp(store: DataStore) -> None:
    history = SnapshotHistory()
    store.put(NS, {"_id": "a", "v": 1})
    store.put(NS, {"_id": "b", "v": 1})
    history.want(Timestamp(100, 1))
    _apply(history, store, _entry(2, "u", {"_id": "a", "v": 2}, o2={"_id": "a"}))
    _apply(history, store, _entry(3, "d", {"_id": "b"}))
    _apply(history, store, _entry(4, "i", {"_id": "c", "v": 1}))
    _apply(history, store, _entry(5, "u", {"_id": "a", "v": 3}, o2={"_id": "a"}))
    at_start = SnapshotView(store, history, Timestamp(100, 1))
    assert _ids(at_start) == {"a": 1, "b": 1}
    assert at_start.get(NS, "a") == {"_id": "a", "v": 1}
    assert at_start.get(NS, "c") is None
    assert at_start.count(NS) == 2
    assert _ids(SnapshotView(store, history, Timestamp(100, 3))) == {"a": 2}
    assert _ids(SnapshotView(store, history, Timestamp(100, 5))) == _ids(store) == {"a": 3, "c": 1}


def test_a_transactions_own_changes_lie_over_its_snapshot(store: DataStore) -> None:
    history = SnapshotHistory()
    store.put(NS, {"_id": "a", "v": 1})
    store.put(NS, {"_id": "b", "v": 1})
    history.want(Timestamp(100, 1))
    own = {NS: {id_key("a"): None, id_key("b"): {"_id": "b", "v": 9}, id_key("n"): {"_id": "n"}}}
    view = SnapshotView(store, history, Timestamp(100, 1), own)
    assert _ids(view) == {"b": 9, "n": None}
    assert view.get(NS, "a") is None
    assert view.exists(NS) and not view.exists("bank.other")
    assert _ids(store) == {"a": 1, "b": 1}  # nothing of it reached the store


def test_one_transaction_entry_records_every_document_it_changes(store: DataStore) -> None:
    history = SnapshotHistory()
    store.put(NS, {"_id": "a", "v": 1})
    history.want(Timestamp(100, 1))
    ops = [
        {"op": "i", "ns": NS, "o": {"_id": "b", "v": 1}},
        {"op": "u", "ns": NS, "o": {"_id": "a", "v": 2}, "o2": {"_id": "a"}},
    ]
    _apply(history, store, make_entry("c", "admin.$cmd", {"applyOps": ops},
                                      ts=Timestamp(100, 2), term=1))  # fmt: skip
    assert _ids(store) == {"a": 2, "b": 1}
    assert _ids(SnapshotView(store, history, Timestamp(100, 1))) == {"a": 1}
    assert history.changed_after(NS, id_key("b"), (100, 1))
    assert not history.changed_after(NS, id_key("b"), (100, 2))


def test_reads_before_the_history_began_are_refused(store: DataStore) -> None:
    history = SnapshotHistory()
    with pytest.raises(SnapshotTooOld):
        history.check(Timestamp(100, 5))  # nobody asked: nothing recorded
    history.want(Timestamp(100, 5))
    history.check(Timestamp(100, 5))
    with pytest.raises(SnapshotTooOld):
        history.check(Timestamp(100, 4))
    history.forget()
    with pytest.raises(SnapshotTooOld):
        history.check(Timestamp(100, 5))


def test_recording_stops_when_no_one_wants_it(
    store: DataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(snapshot, "HISTORY_WINDOW_S", 0.05)
    history = SnapshotHistory()
    store.put(NS, {"_id": "a", "v": 1})
    history.want(Timestamp(100, 1))
    _apply(history, store, _entry(2, "u", {"_id": "a", "v": 2}, o2={"_id": "a"}))
    assert history.changed_after(NS, id_key("a"), (100, 1))
    time.sleep(0.1)  # the time under test: the 0.05 s window passes with no one asking
    _apply(history, store, _entry(3, "u", {"_id": "a", "v": 3}, o2={"_id": "a"}))
    assert not history.changed_after(NS, id_key("a"), (100, 1))
    with pytest.raises(SnapshotTooOld):
        history.check(Timestamp(100, 1))
