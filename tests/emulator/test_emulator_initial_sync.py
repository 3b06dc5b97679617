"""Members that fall behind on the emulator: one too stale for the oplog stays RECOVERING until
resynced; an initial sync takes time with the data it copies (and a rate cap), a restart on kept
data does not. Apart from test_emulator_replset.py so that two xdist workers share them."""

from __future__ import annotations

import time

import pytest
from pymongo import WriteConcern
from pymongo.errors import PyMongoError

from rsdrill.sandbox.config import member_dir
from rsdrill.sandbox.groundtruth import read_events
from tests.harness.members import member_state, wait_until, writable_primary


def test_too_stale_member_stays_recovering_until_resynced(replset, client_for) -> None:
    sandbox = replset("rs3", oplog_size_bytes=1024 * 1024)
    primary = writable_primary(sandbox)
    assert primary is not None
    lagging = next(m for m in sandbox.spec.members if m.host != primary.host)
    sandbox.kill(lagging)
    coll = client_for(sandbox).db.get_collection("bulk", write_concern=WriteConcern(w="majority"))
    # Batches well under the oplog's size, so the live secondary keeps up.
    for batch in range(100):
        coll.insert_many([{"b": batch, "pad": "p" * 1000} for _ in range(100)])
    sandbox.start(lagging)
    wait_until(lambda: member_state(lagging.host) == "RECOVERING", 10, "RECOVERING")
    time.sleep(3)  # the time under test: the member stays RECOVERING, it does not resync itself
    assert member_state(lagging.host) == "RECOVERING"
    events = read_events(member_dir(sandbox.directory, lagging) / "events.jsonl")
    assert any(e["event"] == "too_stale" for e in events)
    sandbox.kill(lagging)
    sandbox.start(lagging, wipe=True)
    wait_until(lambda: member_state(lagging.host) == "SECONDARY", 60, "SECONDARY after resync")
    direct = client_for(lagging.host, readPreference="secondaryPreferred")
    assert direct.db.bulk.count_documents({}) == 10_000


def _load(coll, megabytes: int, start: int) -> int:
    """Insert about `megabytes` MB of 1 KB documents; returns the next free _id."""
    pad = "p" * 1000
    for first in range(start, start + megabytes * 1000, 1000):
        coll.insert_many([{"_id": i, "pad": pad} for i in range(first, first + 1000)])
    return start + megabytes * 1000


def _time_to_secondary(sandbox, member, *, wipe: bool) -> tuple[float, list[str]]:
    """Kill the member, start it (kept or empty directory), time it to SECONDARY."""
    sandbox.kill(member)
    started = time.monotonic()
    sandbox.start(member, wipe=wipe)
    seen: list[str] = []
    while time.monotonic() - started < 120:
        try:
            state = member_state(member.host)
        except PyMongoError:
            state = None
        if state and (not seen or seen[-1] != state):
            seen.append(state)
        if state == "SECONDARY":
            return time.monotonic() - started, seen
        time.sleep(0.02)
    pytest.fail(f"{member.host} not SECONDARY after 120 s; states seen: {seen}")


@pytest.mark.slow
def test_initial_sync_grows_with_data_while_restart_stays_flat(replset, client_for) -> None:
    # The copy capped at 10 MB/s, as a disk or a network caps it: uncapped, it runs as fast as
    # the CPU allows and the data it takes is drowned by the machine's load and the member's
    # fixed start-up costs (the reason this test once needed 50 and 200 MB).
    sandbox = replset("rs3", oplog_size_bytes=400 * 1024 * 1024,
                      initial_sync_bytes_per_s=10 * 1024 * 1024)  # fmt: skip
    primary = writable_primary(sandbox)
    assert primary is not None
    member = next(m for m in sandbox.spec.members if m.host != primary.host)
    coll = client_for(sandbox).db.get_collection("big", write_concern=WriteConcern(w="majority"))
    next_id = _load(coll, 5, 0)
    sync_5, states_5 = _time_to_secondary(sandbox, member, wipe=True)
    keep_5, _ = _time_to_secondary(sandbox, member, wipe=False)
    _load(coll, 35, next_id)
    sync_40, states_40 = _time_to_secondary(sandbox, member, wipe=True)
    keep_40, _ = _time_to_secondary(sandbox, member, wipe=False)
    assert "STARTUP2" in states_5 and "STARTUP2" in states_40
    assert sync_40 > 2 * sync_5, f"initial sync 5 MB {sync_5:.1f}s, 40 MB {sync_40:.1f}s"
    assert keep_5 < 3 and keep_40 < 3, f"restarts took {keep_5:.1f}s and {keep_40:.1f}s"
    direct = client_for(member.host, readPreference="secondaryPreferred")
    assert direct.db.big.count_documents({}) == 40_000


def test_initial_sync_rate_cap_slows_the_copy(replset, client_for) -> None:
    sandbox = replset("rs3", initial_sync_bytes_per_s=2 * 1024 * 1024)
    primary = writable_primary(sandbox)
    assert primary is not None
    member = next(m for m in sandbox.spec.members if m.host != primary.host)
    _load(client_for(sandbox).db.get_collection("big", write_concern=WriteConcern(w=3)), 4, 0)
    took, states = _time_to_secondary(sandbox, member, wipe=True)
    assert "STARTUP2" in states
    assert took >= 1.8, f"4 MB at 2 MB/s took only {took:.2f}s"
