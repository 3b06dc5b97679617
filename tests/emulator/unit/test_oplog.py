"""The capped oplog and optime ordering."""

from __future__ import annotations

import itertools
from pathlib import Path

import bson
import pytest
from bson.timestamp import Timestamp

from rsdrill_emulator import oplog as oplog_module
from rsdrill_emulator.oplog import NULL_OPTIME, Oplog, OpTime, TimestampClock, make_entry
from rsdrill_emulator.storage import Database


def _oplog(tmp_path: Path, capacity: int) -> Oplog:
    database = Database(tmp_path / f"db{capacity}")
    database.open()
    return Oplog(capacity, database)


def _entry(term: int, secs: int, inc: int, pad: int = 0) -> dict:
    return make_entry("i", "d.c", {"_id": inc, "p": "x" * pad}, ts=Timestamp(secs, inc), term=term)


def test_optime_orders_by_term_before_timestamp() -> None:
    assert OpTime(2, 5, 1) > OpTime(1, 100, 1)
    assert OpTime(1, 5, 2) > OpTime(1, 5, 1)
    assert OpTime(0, 0, 0) > NULL_OPTIME


def test_capped_oplog_trims_oldest_and_keeps_newest(tmp_path: Path) -> None:
    oplog = _oplog(tmp_path, 1000)
    for i in range(1, 21):
        oplog.append(_entry(1, 10, i, pad=100))
    assert oplog.size_bytes <= 1000
    assert oplog.newest == OpTime(1, 10, 20)
    assert oplog.oldest > OpTime(1, 10, 1)
    assert not oplog.contains(OpTime(1, 10, 1))
    assert oplog.contains(OpTime(1, 10, 20))
    single = _oplog(tmp_path, 10)
    single.append(_entry(1, 10, 1, pad=100))
    assert len(single) == 1  # never trims its own position away


def test_entries_after_and_truncate(tmp_path: Path) -> None:
    oplog = _oplog(tmp_path, 10**6)
    for i in range(1, 6):
        oplog.append(_entry(1, 10, i))
    after = oplog.entries_after(OpTime(1, 10, 2), max_bytes=10**6)
    assert [e["ts"].inc for e in after] == [3, 4, 5]
    assert len(oplog.entries_after(OpTime(1, 10, 2), max_bytes=1)) == 1
    removed = oplog.truncate_after(OpTime(1, 10, 3))
    assert [e["ts"].inc for e in removed] == [4, 5]
    assert oplog.newest == OpTime(1, 10, 3)


def test_append_refuses_an_older_entry(tmp_path: Path) -> None:
    oplog = _oplog(tmp_path, 10**6)
    oplog.append(_entry(2, 10, 1))
    try:
        oplog.append(_entry(1, 11, 1))
    except ValueError as exc:
        assert "not newer" in str(exc)
    else:
        raise AssertionError("an older optime was accepted")


def test_timestamp_clock_is_strictly_increasing() -> None:
    clock = TimestampClock()
    clock.observe(Timestamp(2**31 - 10, 5))  # a future second seen from another member
    stamps = [clock.next() for _ in range(100)]
    assert all((a.time, a.inc) < (b.time, b.inc) for a, b in itertools.pairwise(stamps))
    assert stamps[0] == Timestamp(2**31 - 10, 6)


def test_oplog_survives_reopening(tmp_path: Path) -> None:
    database = Database(tmp_path / "db")
    database.open()
    oplog = Oplog(10**6, database)
    for i in range(1, 4):
        oplog.append(_entry(2, 10, i, pad=10))
    database.set_meta("initialized", True)
    database.commit()
    oplog.append(_entry(2, 10, 4))  # not committed: lost with the process
    database.close()
    reopened = Database(tmp_path / "db")
    assert reopened.exists()
    reopened.open()
    again = Oplog(10**6, reopened)
    assert len(again) == 3 and again.newest == OpTime(2, 10, 3) and again.oldest == OpTime(2, 10, 1)


def test_the_in_memory_tail_answers_as_the_database_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through appends that evict from the tail, trims of the capped oplog and rollbacks on
    either side of the tail's start, what the tail answers is what the database holds."""
    monkeypatch.setattr(oplog_module, "TAIL_BYTES", 2000)
    oplog = _oplog(tmp_path, 5000)
    inc = itertools.count(1)

    term = 1

    def append(n: int) -> None:
        for _ in range(n):
            oplog.append(_entry(term, 10, next(inc), pad=50))

    def check() -> list[OpTime]:
        on_disk = Oplog(5000, oplog.database)  # a fresh tail: everything from the database
        keys = on_disk.keys_newest_first()
        assert oplog.cached(keys[0]) and not oplog.cached(keys[-1])
        for key in [*keys, NULL_OPTIME, OpTime(1, 10, 10**6)]:
            assert oplog.contains(key) == on_disk.contains(key), key
            assert _encoded([oplog.entry_at(key)]) == _encoded([on_disk.entry_at(key)]), key
            for max_bytes in (1, 300, 10**6):
                assert _encoded(oplog.entries_after(key, max_bytes)) == _encoded(
                    on_disk.entries_after(key, max_bytes)
                ), (key, max_bytes)
            everything = on_disk.entries_after(NULL_OPTIME, 10**9)
            for inclusive in (False, True):
                wanted = [e for e in everything if e["ts"] > key.timestamp
                          or (inclusive and e["ts"] == key.timestamp)]  # fmt: skip
                found = oplog.entries_from_ts(key.timestamp, inclusive)
                assert _encoded(found) == _encoded(wanted), (key, inclusive)
                assert _encoded(on_disk.entries_from_ts(key.timestamp, inclusive)) == _encoded(
                    wanted
                ), (key, inclusive)
        return keys

    append(80)  # over the capacity too: the oldest entries are trimmed from the database
    keys = check()
    oplog.truncate_after(keys[3])  # a rollback within the tail
    append(5)
    keys = check()
    cold = next(k for k in keys if not oplog.cached(k))
    oplog.truncate_after(cold)  # a rollback past the tail's start empties it
    assert not oplog.cached(cold)
    append(30)
    check()
    term = 2  # an election: the new term's timestamps go on from the old term's
    append(5)
    check()


def _encoded(entries: list[dict | None]) -> list[bytes | None]:
    return [None if e is None else bson.encode(e) for e in entries]


def _open_steps(database: Database, capacity: int) -> tuple[Oplog, int]:
    """An Oplog opened on `database`, and the SQLite virtual-machine steps (in hundreds) it took."""
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0

    database.db.set_progress_handler(count, 100)
    try:
        return Oplog(capacity, database), steps
    finally:
        database.db.set_progress_handler(None, 0)


@pytest.mark.parametrize("entries", [1000, 10000])
def test_reopening_reads_the_stored_figures_not_the_whole_oplog(
    tmp_path: Path, entries: int
) -> None:
    """A restart on a kept volume costs the same whatever the oplog holds (it scanned the whole
    oplog for its count and bytes: 30 MB of data made a kept member's restart 1.1 s slower on a
    busy CI machine); the figures are exact across appends, trims and a truncation."""
    database = Database(tmp_path / "db")
    database.open()
    oplog = Oplog(entries * 60, database)
    for i in range(1, entries + 200):  # past the capacity: trimmed from the oldest end
        oplog.append(_entry(1, 10, i, pad=10))
    oplog.truncate_after(OpTime(1, 10, entries + 150))
    database.commit()
    rows, size = database.execute("SELECT COUNT(*), SUM(LENGTH(entry)) FROM oplog").fetchone()
    assert (len(oplog), oplog.size_bytes) == (rows, size) and rows < entries
    database.close()
    reopened = Database(tmp_path / "db")
    reopened.open()
    again, steps = _open_steps(reopened, entries * 60)
    assert (len(again), again.size_bytes) == (rows, size)
    assert steps < 20, steps  # the scan took 25 for 1000 entries, 280 for 10000; now 0


def test_an_oplog_without_stored_figures_is_counted_once(tmp_path: Path) -> None:
    database = Database(tmp_path / "db")
    database.open()
    oplog = Oplog(10**6, database)
    for i in range(1, 6):
        oplog.append(_entry(1, 10, i, pad=10))
    database.commit()
    database.execute("DELETE FROM meta WHERE key = 'oplog_size'")  # as written before them
    assert Oplog(10**6, database).size_bytes == oplog.size_bytes and len(oplog) == 5
