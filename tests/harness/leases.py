"""Runs racing for one cluster's lease: threads released together by a barrier, each with a
store of its own (its own connection), as separate processes would be."""

from __future__ import annotations

import threading
from collections.abc import Callable

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
