"""Runs racing for one cluster's lease: threads released together by a barrier, each with a
store of its own (its own connection), as separate processes would be; after nobody held it,
after its holder died (its lease expired), or after its holder let it go."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Literal

from rsdrill.fleet.lease import ClusterLease, LeaseHeld
from rsdrill.fleet.store import FleetStore


def race(store: Callable[[], FleetStore], key: bytes, cluster: str,
         runs: int) -> tuple[list[ClusterLease], list[str]]:  # fmt: skip
    """`runs` threads take the cluster's lease at once: the leases won, the names refused."""
    won: list[ClusterLease] = []
    refused: list[str] = []
    go = threading.Barrier(runs)

    def contend(name: str) -> None:
        lease = ClusterLease(store(), key, cluster, name)
        go.wait()
        try:
            lease.take()
            won.append(lease)
        except LeaseHeld:
            refused.append(name)

    threads = [threading.Thread(target=contend, args=(f"run{i}",)) for i in range(runs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return won, refused


Before = Literal["none", "expired", "released"]


def race_after(store: FleetStore, make: Callable[[], FleetStore], key: bytes, cluster: str,
               before: Before, runs: int = 6) -> ClusterLease:  # fmt: skip
    """Leave the cluster's lease as `before` says, let `runs` runs race for it, check that
    exactly one won and that the store holds its lease; the winner."""
    if before == "expired":
        dead = ClusterLease(store, key, cluster, "dead", ttl_s=-1.0)
        assert store.put_lease(cluster, dead._stamped(), replacing=None)
    elif before == "released":
        gone = ClusterLease(store, key, cluster, "gone")
        gone.take()
        gone.release()
    won, refused = race(make, key, cluster, runs)
    assert len(won) == 1 and len(refused) == runs - 1, ([w.record for w in won], refused)
    held = store.lease(cluster)
    assert held is not None and held["token"] == won[0].record["token"]
    return won[0]
