"""The fleet's lever and leases on the SQLite store, in process: the newest genuine lever
event decides; records not signed with the fleet key are ignored (a store writer without the
key cannot stop, release or hold runs) and a log of nothing but such records stops runs; a
lease is taken by one run only, expires after its TTL or with its holder's process on this
machine, and is renewed while held."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rsdrill.fleet import lever
from rsdrill.fleet.gate import FleetGate
from rsdrill.fleet.lease import ClusterLease, LeaseHeld
from rsdrill.fleet.location import open_store
from rsdrill.fleet.signing import genuine, signed
from rsdrill.fleet.store import SqliteFleetStore

pytestmark = pytest.mark.quick
KEY = b"k" * 32
CLUSTER = "127.0.0.1:27017,127.0.0.1:27018,127.0.0.1:27019"


@pytest.fixture
def store(tmp_path: Path) -> SqliteFleetStore:
    return SqliteFleetStore(tmp_path / "fleet.sqlite")


def test_a_signed_record_is_genuine_until_a_field_changes() -> None:
    record = signed({"engaged": True, "reason": "incident", "at": "x"}, KEY)
    assert genuine(record, KEY)
    assert not genuine({**record, "engaged": False}, KEY)
    assert not genuine(record, b"x" * 32)
    assert not genuine({"engaged": True, "at": "x"}, KEY)  # unsigned
    assert genuine({"engaged": True}, None)  # no key: every record counts


def test_the_newest_genuine_event_decides_and_forgeries_are_counted(
    store: SqliteFleetStore,
) -> None:
    assert not lever.state(store, KEY).engaged
    lever.engage(store, KEY, "prod incident 4711", by="sre@box")
    now = lever.state(store, KEY)
    assert now.engaged and now.reason == "prod incident 4711" and now.by == "sre@box"
    # Someone who can write to the store but has no key tries to let runs go again.
    store.add_lever_event({"engaged": False, "reason": "", "by": "mallory", "at": "9999"})
    forged = lever.state(store, KEY)
    assert forged.engaged and forged.ignored == 1
    assert "1 newer record(s) not signed" in forged.describe()
    lever.disengage(store, KEY, by="sre@box")
    assert not lever.state(store, KEY).engaged


def test_a_log_of_nothing_but_forgeries_stops_runs(store: SqliteFleetStore) -> None:
    lever.engage(store, KEY, "genuine, then buried")
    for _ in range(lever.LOOKBACK):
        store.add_lever_event({"engaged": False, "at": "9999"})
    buried = lever.state(store, KEY)
    assert buried.engaged and "cannot be read" in buried.reason


def test_a_genuine_event_copied_in_again_does_not_move_the_lever(
    store: SqliteFleetStore,
) -> None:
    lever.disengage(store, KEY, by="sre@box")
    old = store.lever_events(1)[0]
    lever.engage(store, KEY, "prod incident 4711")
    # Someone who can write to the store but has no key copies an old genuine "disengaged"
    # back in, as often as the lever reads: it was signed before the engagement, so it is old.
    for _ in range(lever.LOOKBACK):
        store.add_lever_event(old)
    assert lever.state(store, KEY).engaged


def test_one_run_holds_a_cluster_and_the_next_is_told_who(store: SqliteFleetStore) -> None:
    first = ClusterLease(store, KEY, CLUSTER, "rs3-primary-kill")
    first.take()
    try:
        second = ClusterLease(store, KEY, CLUSTER, "rs3-stepdown")
        with pytest.raises(LeaseHeld, match=r"held by another run: experiment 'rs3-primary-kill'"
                           rf".*pid {os.getpid()}"):  # fmt: skip
            second.take()
        ClusterLease(store, KEY, "other-cluster", "rs3-stepdown").take()  # another cluster: free
    finally:
        first.release()
    assert store.lease(CLUSTER) is None
    again = ClusterLease(store, KEY, CLUSTER, "rs3-stepdown")
    again.take()
    again.release()


def test_a_lease_expires_after_its_ttl_and_a_waiting_run_gets_it(store: SqliteFleetStore) -> None:
    crashed = ClusterLease(store, KEY, CLUSTER, "crashed", ttl_s=1.0)
    crashed.take()
    crashed._stop.set()  # it renews no more, as after a crash on another machine
    waiting = ClusterLease(store, KEY, CLUSTER, "next")
    started = time.monotonic()
    waiting.take(wait_s=10.0)
    assert 0.5 < time.monotonic() - started < 5.0
    assert store.lease(CLUSTER)["experiment"] == "next"  # type: ignore[index]
    waiting.release()


def test_a_dead_local_holder_s_lease_is_taken_at_once(store: SqliteFleetStore) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    holder = ClusterLease(store, KEY, CLUSTER, "killed")
    holder.record["pid"] = int(dead.stdout)
    assert store.put_lease(CLUSTER, holder._stamped(), replacing=None)
    ClusterLease(store, KEY, CLUSTER, "next").take()


def test_an_unsigned_lease_holds_nothing(store: SqliteFleetStore) -> None:
    assert store.put_lease(CLUSTER, {"token": "t", "experiment": "forged", "until": 1e12},
                           replacing=None)  # fmt: skip
    lease = ClusterLease(store, KEY, CLUSTER, "real")
    lease.take()
    assert store.lease(CLUSTER)["experiment"] == "real"  # type: ignore[index]
    lease.release()


def test_another_cluster_s_lease_copied_here_holds_nothing(store: SqliteFleetStore) -> None:
    elsewhere = ClusterLease(store, KEY, "other-cluster", "running elsewhere")
    elsewhere.take()
    try:
        copied = store.lease("other-cluster")
        assert copied is not None and store.put_lease(CLUSTER, copied, replacing=None)
        lease = ClusterLease(store, KEY, CLUSTER, "real")
        lease.take()
        assert store.lease(CLUSTER)["experiment"] == "real"  # type: ignore[index]
        lease.release()
    finally:
        elsewhere.release()


def test_a_held_lease_is_renewed_and_a_taken_one_is_noticed(
    store: SqliteFleetStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("rsdrill.fleet.lease.RENEW_EVERY_S", 0.1)
    lease = ClusterLease(store, KEY, CLUSTER, "long run", ttl_s=5.0)
    lease.take()
    first = store.lease(CLUSTER)["until"]  # type: ignore[index]
    time.sleep(0.5)
    assert store.lease(CLUSTER)["until"] > first  # type: ignore[index]
    # Its lease replaced behind its back (after a long stall): the run is told.
    current = store.lease(CLUSTER)
    assert store.put_lease(CLUSTER, signed({"token": "other", "until": 1e12}, KEY), current)
    time.sleep(0.5)
    assert lease.lost is not None and "lost the lease" in lease.lost
    lease.release()


def test_the_gate_stops_a_run_once_the_lever_is_engaged(store: SqliteFleetStore) -> None:
    gate = FleetGate(store, KEY, "exp", poll_s=0.05)
    assert gate.stopped() is None
    lever.engage(store, KEY, "stop everything")
    time.sleep(0.1)
    assert "stop everything" in (gate.stopped() or "")


def test_store_locations(tmp_path: Path) -> None:
    assert isinstance(open_store(tmp_path / "a.sqlite"), SqliteFleetStore)
    absolute = open_store(f"sqlite:///{tmp_path}/b.sqlite")
    assert absolute.where == f"{tmp_path}/b.sqlite"
    made = SqliteFleetStore(tmp_path / "new" / "fleet.sqlite")
    made.add_lever_event({"engaged": False, "at": "x"})
    assert (tmp_path / "new" / "fleet.sqlite").stat().st_mode & 0o077 == 0  # owner only


def test_the_library_s_run_does_not_start_under_the_lever(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`rsdrill.run` (and so the pytest plugin's `rsdrill` fixture) honours the lever as
    `rsdrill run` does: nothing built, verdict aborted, exit code 5; `fleet=False` opts out."""
    import rsdrill
    from rsdrill.experiment.loader import load_experiment_text
    from rsdrill.fleet.location import FLEET_ENV, fleet_location

    monkeypatch.setenv("RSDRILL_HOME", str(tmp_path / "home"))
    monkeypatch.delenv(FLEET_ENV, raising=False)
    monkeypatch.delenv("RSDRILL_HISTORY", raising=False)
    monkeypatch.delenv("RSDRILL_FLEET_KEY", raising=False)
    lever.engage(open_store(fleet_location(None)), None, "library drill")
    experiment = load_experiment_text(
        "name: lib\ntarget: {platform: sandbox, topology: rs1}\n"
        "faults:\n  - {at: 1s, kind: host-kill, select: primary, duration: 2s}\n",
        "lib.yaml",
    )
    result = rsdrill.run(experiment, tmp_path / "out")
    assert (result.verdict, result.exit_code) == ("aborted", 5)
    assert result.error is not None and "library drill" in result.error
    assert not (tmp_path / "out" / "sandbox").exists()
    # A shared store named without the key is refused before anything.
    monkeypatch.setenv(FLEET_ENV, "mongodb://127.0.0.1:1/fleet")
    with pytest.raises(rsdrill.RsdrillError, match="needs the fleet key"):
        rsdrill.run(experiment, tmp_path / "out2")


def test_the_lease_is_on_what_the_file_names_before_anything_is_asked() -> None:
    from rsdrill.experiment.loader import load_experiment_text
    from rsdrill.fleet.gate import cluster_key

    def key(target: str) -> str | None:
        return cluster_key(load_experiment_text(
            f"name: k\ntarget: {target}\nfaults:\n  - {{at: 1s, kind: host-kill, "
            "select: primary, duration: 2s}\n", "k.yaml"))  # fmt: skip

    assert key("{platform: sandbox, topology: rs3, cluster: named}") is None  # its own, new
    assert (
        key(
            "{platform: local, topology: rs3, cluster: staging-eu, uri: 'mongodb://b:2,a:1/',"
            " members: [{host: 'a:1', start: x}, {host: 'b:2', start: x}]}"
        )
        == "staging-eu"
    )
    assert (
        key(
            "{platform: local, topology: rs3, uri: 'mongodb://b:2,a:1/?replicaSet=rs0',"
            " members: [{host: 'c:3', start: x}]}"
        )
        == "a:1,b:2,c:3"
    )
