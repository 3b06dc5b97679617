"""A member's page cache: warmed by what it writes and reads, empty after a restart, bounded by
`cache_bytes`; a miss is a read() of its files (counted here by the kernel: /proc/self/io)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rsdrill_emulator.datastore import DataStore
from rsdrill_emulator.storage import PAGE_BYTES, Database
from tests.harness.procio import io_counter

NS = "app.records"
RECORDS = 3000
RECORD_BYTES = 1000  # 3 MB: about 190 pages of 16 KiB
PAGES = RECORDS * RECORD_BYTES // PAGE_BYTES


def read_calls() -> int:
    """read() calls this process has made so far."""
    return io_counter("syscr")


def read_all(store: DataStore) -> int:
    """Look every record up by _id, as the load probe's reads do; the read() calls it took."""
    before = read_calls()
    for i in range(RECORDS):
        assert store.get(NS, i) is not None
    return read_calls() - before


def opened(dbpath: Path, cache_bytes: int | None) -> DataStore:
    database = Database(dbpath, cache_bytes=cache_bytes)
    database.open()
    return DataStore(database)


@pytest.fixture
def written(tmp_path: Path) -> Iterator[Path]:
    """A data directory holding the records, committed and closed."""
    store = opened(tmp_path / "data", None)
    for i in range(RECORDS):
        store.put(NS, {"_id": i, "field0": "x" * RECORD_BYTES})
    store.database.commit()
    store.database.close()
    yield tmp_path / "data"


def test_without_the_option_the_cache_is_the_64_mib_it_always_was(tmp_path: Path) -> None:
    store = opened(tmp_path / "data", None)
    assert store.database.db.execute("PRAGMA cache_size").fetchone()[0] == -65536
    sized = opened(tmp_path / "other", 8 * 1024 * 1024)
    assert sized.database.db.execute("PRAGMA cache_size").fetchone()[0] == -8192


def test_what_a_member_writes_is_warm(tmp_path: Path) -> None:
    store = opened(tmp_path / "data", 32 * 1024 * 1024)
    for i in range(RECORDS):
        store.put(NS, {"_id": i, "field0": "x" * RECORD_BYTES})
    store.database.commit()
    assert read_all(store) < 10


def test_a_restarted_member_reads_its_working_set_from_disk_once(written: Path) -> None:
    store = opened(written, 32 * 1024 * 1024)
    cold = read_all(store)
    warm = read_all(store)
    assert cold >= 0.8 * PAGES, (cold, PAGES)
    assert warm < 10, warm


def test_a_cache_smaller_than_the_working_set_keeps_missing(written: Path) -> None:
    store = opened(written, 1024 * 1024)
    read_all(store)
    again = read_all(store)
    assert again >= 0.5 * PAGES, (again, PAGES)
