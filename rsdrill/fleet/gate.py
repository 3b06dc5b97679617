"""What a run asks the fleet: may it start (the lever), may it have this cluster (its lease),
and, while it runs, must it stop (the lever engaged, the lease lost). The runner calls it
through `rsdrill.engine.options.RunGate`."""

from __future__ import annotations

import threading
import time

from rsdrill.errors import RsdrillError
from rsdrill.experiment.schema import Experiment
from rsdrill.fleet import lever
from rsdrill.fleet.lease import ClusterLease
from rsdrill.fleet.location import fleet_location, open_fleet
from rsdrill.fleet.store import FleetStore, FleetStoreError
from rsdrill.registry import member_source

POLL_S = 1.0
"""How often a running experiment reads the lever (the issue's bound: 2 s)."""


class FleetGate:
    def __init__(self, store: FleetStore, key: bytes | None, experiment: str,
                 cluster: str | None = None, lease_wait_s: float = 0.0,
                 poll_s: float = POLL_S) -> None:  # fmt: skip
        self.store, self.key, self.experiment = store, key, experiment
        self.cluster = cluster  # what the lease is on (None: nothing to hold)
        self.lease_wait_s, self.poll_s = lease_wait_s, poll_s
        self._lease: ClusterLease | None = None
        self._read_at = 0.0
        self._state = lever.LeverState(False)
        self._lock = threading.Lock()
        # The store went unreachable during the run: said once, the last state kept.
        self.unreachable: str | None = None

    def stopped(self) -> str | None:
        """Why the run must stop now (the lever engaged, the lease lost), else None; reads
        the lever at most every `poll_s`."""
        if self._lease is not None and self._lease.lost:
            return self._lease.lost
        with self._lock:
            if time.monotonic() - self._read_at >= self.poll_s:
                self._read_at = time.monotonic()
                try:
                    self._state = lever.state(self.store, self.key)
                except FleetStoreError as exc:
                    self.unreachable = str(exc)
            if self._state.engaged:
                return f"the fleet's stop lever is {self._state.describe()}"
        return None

    def hold(self) -> None:
        """Take the cluster's lease, waiting up to `lease_wait_s` (LeaseHeld when another run
        keeps it); nothing when it is held already, or there is no cluster to hold."""
        if self.cluster is None or self._lease is not None:
            return
        lease = ClusterLease(self.store, self.key, self.cluster, self.experiment)
        lease.take(self.lease_wait_s)
        self._lease = lease

    def release(self) -> None:
        if self._lease is not None:
            self._lease.release()
            self._lease = None


class StoreIsTarget(RsdrillError):
    """The fleet's store is on the cluster the experiment breaks."""


def open_gate(experiment: Experiment, history: str | None, lease_wait_s: float = 0.0) -> FleetGate:
    """The gate of a run of `experiment` whose history is `history` (see
    `rsdrill.fleet.location`). Raises FleetStoreError, FleetKeyError, or StoreIsTarget when
    the store lives on a member of the target."""
    store, key = open_fleet(fleet_location(history))
    shared = set(store.hosts) & set(_target_hosts(experiment))
    if shared:
        on = ", ".join(sorted(shared))
        raise StoreIsTarget(f"the store {store.where} is on the cluster under test ({on}): "
                            "keep the history elsewhere")  # fmt: skip
    return FleetGate(store, key, experiment.name, cluster_key(experiment),
                     lease_wait_s=lease_wait_s)  # fmt: skip


def cluster_key(experiment: Experiment) -> str | None:
    """What a run's lease is on, known before anything reaches the cluster (a run waiting for
    it must not touch a cluster another run is breaking): the cluster the experiment names
    (`target.cluster`), else the hosts its URI and members list name. None for a cluster the
    run builds itself: nobody else's run is on it."""
    target = experiment.target
    if member_source(target.platform) == "built":
        return None
    if target.cluster:
        return target.cluster
    hosts = {*_target_hosts(experiment), *(m.host for m in target.members)}
    return ",".join(sorted(hosts)) or None


def _target_hosts(experiment: Experiment) -> list[str]:
    """The seeds of the target's URI (none for a built sandbox, or one the check refuses)."""
    from rsdrill.connection import SettingsError, parse_uri

    if not experiment.target.uri:
        return []
    try:
        return parse_uri(experiment.target.uri).seeds
    except SettingsError:
        return []
