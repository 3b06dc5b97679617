"""A secondary whose oplog fetch from the primary failed does not fetch from it again at once:
a primary cut off or frozen is passed by for 10 s (mongod's sync source resolver after a
network error), so the new primary gets its majority as soon as it is elected, not a second
fetch timeout later. On emulator member processes, the old primary SIGSTOPped."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from pymongo import MongoClient, WriteConcern

from rsdrill.sandbox.cluster import EmulatorEngine, up
from rsdrill.sandbox.config import Settings, build_topology
from tests.harness.members import wait_until, writable_primary

# A fetch waits half the election timeout plus 5 s (11 s here), so it fails before the
# secondaries' election timers (12 s and up) fire; and heartbeats (30 s) still call the frozen
# primary healthy then. Before the denylist the secondary that did not win fetched from the old
# primary again at 11 s and the new primary waited for it until ~22 s.
SETTINGS = Settings(election_timeout_ms=12_000, heartbeat_timeout_s=30)


def test_the_new_primary_has_a_majority_once_elected(
    sandbox_dir: Path, free_port_base: Callable[[int], int]
) -> None:
    spec = build_topology("rs3", port_base=free_port_base(3), settings=SETTINGS)
    sandbox = up(sandbox_dir, spec, EmulatorEngine())
    old = wait_until(lambda: writable_primary(sandbox), 30, "a primary")
    with MongoClient(old.host, directConnection=True) as client:
        client.t.c.with_options(write_concern=WriteConcern("majority", wtimeout=10_000)).insert_one(
            {"_id": 0}
        )
    sandbox.stop(old)
    frozen_at = time.monotonic()
    # The frozen member answers nothing: the one writable is the new primary.
    new = wait_until(lambda: writable_primary(sandbox), 40, "a new primary", poll=0.1)
    elected_s = time.monotonic() - frozen_at
    with MongoClient(new.host, directConnection=True, socketTimeoutMS=40_000) as client:
        coll = client.t.c.with_options(write_concern=WriteConcern("majority", wtimeout=30_000))
        coll.insert_one({"_id": 1})
    majority_s = time.monotonic() - frozen_at
    sandbox.cont(old)
    # Elected after the fetches failed (else the test shows nothing), and a majority soon after.
    assert elected_s > 11, elected_s
    assert majority_s - elected_s < 6, (elected_s, majority_s)
