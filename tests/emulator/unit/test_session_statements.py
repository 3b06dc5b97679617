"""Retryable writes' recorded statements (rsdrill_emulator/datastore.py), over a real data store:
a newer transaction number retires every statement of the older one, whether this process wrote
them or found them on disk."""

from __future__ import annotations

from pathlib import Path

from bson.binary import Binary

from rsdrill_emulator.datastore import DataStore
from rsdrill_emulator.storage import Database

LSID = {"id": Binary(b"\x01" * 16, 4)}


def _store(path: Path) -> DataStore:
    database = Database(path)
    database.open()
    return DataStore(database)


def _results(store: DataStore, txn: int, stmts: range) -> list[int | None]:
    found = (store.statement_result(LSID, txn, s) for s in stmts)
    return [None if r is None else r["n"] for r in found]


def test_each_number_keeps_only_its_own_statements(tmp_path: Path) -> None:
    store = _store(tmp_path / "data")
    store.record_statement(LSID, 1, 0, {"n": 10})
    store.record_statement(LSID, 2, 0, {"n": 20})  # one statement per number, as insert_one
    assert _results(store, 2, range(3)) == [20, None, None]
    assert _results(store, 1, range(3)) == [None, None, None]
    store.record_statement(LSID, 3, 1, {"n": 31})  # another statement id than the last number's
    assert _results(store, 3, range(3)) == [None, 31, None]
    store.record_statement(LSID, 4, 0, {"n": 40})
    store.record_statement(LSID, 4, 1, {"n": 41})
    store.record_statement(LSID, 5, 1, {"n": 51})  # the older number had two
    assert _results(store, 5, range(3)) == [None, 51, None]
    store.record_statement(LSID, 4, 0, {"n": 99})  # an older number than the newest: ignored
    assert _results(store, 5, range(3)) == [None, 51, None]


def test_statements_found_on_disk_are_retired_by_a_newer_number(tmp_path: Path) -> None:
    store = _store(tmp_path / "data")
    store.record_statement(LSID, 7, 0, {"n": 70})
    store.record_statement(LSID, 7, 1, {"n": 71})
    store.database.commit()
    store.database.close()
    again = _store(tmp_path / "data")  # a restarted member: it knows nothing but the disk
    assert _results(again, 7, range(2)) == [70, 71]
    again.record_statement(LSID, 7, 2, {"n": 72})
    again.record_statement(LSID, 8, 2, {"n": 82})
    assert _results(again, 8, range(3)) == [None, None, 82]
