"""A chunk migration under faults, each at a chosen step (the router's moveChunkHangAtStepN
fail points, as MongoDB's own migration tests hold the donor): the donor's primary killed or
stepped down, the recipient's primary killed or partitioned (nftables, from everyone), the
config servers' primary killed before the commit, the router running the
migration killed before and after its commit. Writes go on through both routers all along.

Afterwards, as MongoDB promises: every acknowledged write is there exactly once through the
routers, the range is owned by one shard and its documents are on that shard only (no copy
left where the range is not owned), no migration record is left, and the collection takes a
new migration."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pymongo import MongoClient, WriteConcern
from pymongo.errors import ExecutionTimeout, OperationFailure, PyMongoError

from rsdrill.connection import ConnectOptions
from rsdrill.platforms.machine.network import NetworkPartition
from rsdrill.platforms.sandbox.sharded import ShardedHosts
from rsdrill.sandbox.config import Settings
from rsdrill.sandbox.members import is_writable_primary
from rsdrill.sandbox.sharded import ShardedSandbox, cluster_size, up_sharded
from tests.harness.sharded_cluster import ELECTION_TIMEOUT_MS, describe

pytestmark = pytest.mark.timeout(180)
SPLIT = 500


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, free_port_base: Callable[[int], int]
) -> Iterator[ShardedSandbox]:
    directory = tmp_path_factory.mktemp("migrations")
    sandbox = up_sharded(directory, port_base=free_port_base(cluster_size(2, "rs3", 2)),
                         settings=Settings(election_timeout_ms=ELECTION_TIMEOUT_MS),
                         balancer=False)  # fmt: skip
    try:
        yield sandbox
    finally:
        sandbox.down(grace_s=2.0)


class Writers:
    """Inserts through both routers until stopped: `{_id: n, k: n % 1000}`, w:majority,
    retryable; which were acknowledged and which failed."""

    def __init__(self, cluster: ShardedSandbox, collection: str) -> None:
        self.acknowledged: list[int] = []
        self.failed: list[int] = []
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._write, args=(r, i, collection))
            for i, r in enumerate(cluster.spec.routers)
        ]

    def _write(self, router: str, first: int, collection: str) -> None:
        with MongoClient(router, serverSelectionTimeoutMS=5000, socketTimeoutMS=20_000) as own:
            coll = own["app"].get_collection(collection, write_concern=WriteConcern("majority"))
            n = first
            while not self._stop.is_set():
                try:
                    coll.insert_one({"_id": n, "k": n % 1000})
                    self.acknowledged.append(n)
                except PyMongoError:
                    self.failed.append(n)
                n += 2
                time.sleep(0.005)

    def __enter__(self) -> Writers:
        for thread in self._threads:
            thread.start()
        time.sleep(0.3)
        return self

    def __exit__(self, *exc: object) -> None:
        time.sleep(0.3)
        self._stop.set()
        for thread in self._threads:
            thread.join()


def _owner(client: MongoClient[dict[str, Any]], ns: str) -> str:
    """The shard owning the range from SPLIT up, as the config servers record it."""
    uuid = client["config"]["collections"].find_one({"_id": ns})["uuid"]
    return str(client["config"]["chunks"].find_one({"uuid": uuid, "min": {"k": SPLIT}})["shard"])


def _prepare(cluster: ShardedSandbox, client: MongoClient[dict[str, Any]], coll: str) -> tuple[
        str, str]:  # fmt: skip
    """`app.<coll>` sharded on k, split at SPLIT; the shards that own it and that do not."""
    ns = f"app.{coll}"
    client.admin.command("shardCollection", ns, key={"k": 1})
    client.admin.command("split", ns, middle={"k": SPLIT})
    uuid = client["config"]["collections"].find_one({"_id": ns})["uuid"]
    donor = client["config"]["chunks"].find_one({"uuid": uuid})["shard"]
    return donor, next(s for s in cluster.spec.shards if s != donor)


def _migrate(router: str, ns: str, to: str, outcome: dict[str, Any]) -> threading.Thread:
    def run() -> None:
        with MongoClient(router, serverSelectionTimeoutMS=5000) as one:
            try:
                outcome["reply"] = one.admin.command("moveChunk", ns, find={"k": SPLIT}, to=to)
            except PyMongoError as exc:
                outcome["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _hold(router: str, step: int, on: bool) -> int:
    """Hold migrations at `step` (or not); how often they reached it before (MongoDB's
    configureFailPoint answers that count, and waitForFailPoint waits for a higher one)."""
    with MongoClient(router, serverSelectionTimeoutMS=5000) as one:
        reply = one.admin.command("configureFailPoint", f"moveChunkHangAtStep{step}",
                                  mode="alwaysOn" if on else "off")  # fmt: skip
        return int(reply["count"])


def _wait_step(router: str, step: int, entered: int, migrating: threading.Thread,
               outcome: dict[str, Any]) -> None:  # fmt: skip
    """Until the migration holds at `step`; a migration that ended first fails the test with
    its outcome (why it never got there)."""
    deadline = time.monotonic() + 20
    with MongoClient(router, serverSelectionTimeoutMS=5000) as one:
        while True:
            try:
                one.admin.command("waitForFailPoint", f"moveChunkHangAtStep{step}",
                                  timesEntered=entered + 1, maxTimeMS=500)  # fmt: skip
                return
            except ExecutionTimeout:
                migrating.join(timeout=0.1)
                assert migrating.is_alive(), f"the migration ended before step {step}: {outcome}"
                assert time.monotonic() < deadline, f"step {step} not reached in 20 s"


def _check_consistent(cluster: ShardedSandbox, coll: str, writers: Writers) -> str:
    """Every check of the module's docstring; returns the range's owner."""
    ns = f"app.{coll}"
    with MongoClient(cluster.uri, serverSelectionTimeoutMS=20_000) as client:
        deadline = time.monotonic() + 30
        while client["config"]["migrations"].count_documents({"_id": ns}):
            assert time.monotonic() < deadline, "the migration's record was left"
            time.sleep(0.2)
        owner = _owner(client, ns)
        seen = Counter(d["_id"] for d in client["app"][coll].find({}, {"_id": 1}))
        twice = [i for i, n in seen.items() if n > 1]
        assert not twice, f"read twice through the routers: {twice[:10]}"
        lost = sorted(set(writers.acknowledged) - set(seen))
        assert not lost, f"acknowledged, then lost: {lost[:10]}"
        attempted = set(writers.acknowledged) | set(writers.failed)
        assert set(seen) <= attempted
        assert len(writers.acknowledged) > 10  # writes went on
    for name in cluster.spec.shards:
        if name == owner:
            continue
        with MongoClient(cluster.sets[name].uri, serverSelectionTimeoutMS=20_000) as direct:
            left = direct["app"][coll].count_documents({"k": {"$gte": SPLIT}})
            assert left == 0, f"{left} copies of the range left on {name}, which does not own it"
    return owner


def _moves_again(cluster: ShardedSandbox, coll: str, owner: str) -> None:
    """The range moves once more. The set the fault struck may still be settling (its old
    primary stepping down, the router's view of it a check behind; on a loaded machine, an
    election more), and a migration that meets a NotPrimary answer aborts, as MongoDB's does:
    that one is asked again, as MongoDB's balancer asks on its next round, for 30 s."""
    other = next(s for s in cluster.spec.shards if s != owner)
    deadline = time.monotonic() + 30
    with MongoClient(cluster.uri, serverSelectionTimeoutMS=20_000) as client:
        while True:
            try:
                client.admin.command("moveChunk", f"app.{coll}", find={"k": SPLIT}, to=other)
                break
            except OperationFailure as exc:
                if "not primary" not in str(exc) or time.monotonic() > deadline:
                    raise AssertionError(describe(cluster)) from exc
                time.sleep(0.5)
        assert _owner(client, f"app.{coll}") == other


@pytest.mark.parametrize(("fault", "step"), [
    ("donor-kill", 2), ("donor-kill", 4), ("donor-stepdown", 3), ("recipient-kill", 2),
    ("recipient-partition", 2), ("recipient-partition", 4), ("config-kill", 4),
])  # fmt: skip
def test_a_migration_under_a_shard_fault_keeps_every_write_once(
    cluster: ShardedSandbox, fault: str, step: int
) -> None:
    coll = f"{fault.replace('-', '_')}_{step}"
    router = cluster.spec.routers[0]
    with MongoClient(cluster.uri, serverSelectionTimeoutMS=20_000) as client:
        donor, recipient = _prepare(cluster, client, coll)
    struck = {"donor": donor, "recipient": recipient, "config": "configRS"}[fault.split("-")[0]]
    sandbox = cluster.sets[struck]
    outcome: dict[str, Any] = {}
    with Writers(cluster, coll) as writers:
        entered = _hold(router, step, on=True)
        migrating = _migrate(router, f"app.{coll}", recipient, outcome)
        _wait_step(router, step, entered, migrating, outcome)
        victim = sandbox.resolve("primary")
        cut = None
        if fault.endswith("kill"):
            sandbox.kill(victim)
        elif fault.endswith("partition"):  # from everyone: its set, the routers, the others
            cut = NetworkPartition(ShardedHosts(cluster), victim.host,
                                   [m.host for m in sandbox.spec.members], isolate_from="all",
                                   direction="both")  # fmt: skip
            cut.inject()
        else:
            with MongoClient(victim.host, directConnection=True) as direct:
                direct.admin.command("replSetStepDown", 10, secondaryCatchUpPeriodSecs=5)
        try:
            assert cut is None or cut.verify(5.0)
            time.sleep(0.5)
            _hold(router, step, on=False)
            migrating.join(timeout=60)
            assert not migrating.is_alive()
        finally:
            if cut is not None:
                cut.revert()
    if sandbox.pid(victim) is None:
        sandbox.start(victim)
    owner = _check_consistent(cluster, coll, writers)
    if fault.startswith(("donor", "recipient")):
        # As MongoDB's: a donor's or recipient's new primary aborts the migration.
        assert isinstance(outcome.get("error"), OperationFailure), outcome
        assert owner == donor
    else:
        # The config primary lost before the commit: the commit waits for the next one.
        assert "error" not in outcome, outcome
        assert owner == recipient
    _moves_again(cluster, coll, owner)


@pytest.mark.parametrize("step", [2, 5])
def test_a_migration_whose_router_died_is_recovered_by_another(
    cluster: ShardedSandbox, step: int
) -> None:
    """Killed before its commit, the migration is aborted; after it, finished (the donor's
    range deleted) — by the other router, once the record has gone unpinged."""
    coll = f"router_kill_{step}"
    dying, living = cluster.spec.routers
    with MongoClient(cluster.uri, serverSelectionTimeoutMS=20_000) as client:
        donor, recipient = _prepare(cluster, client, coll)
    outcome: dict[str, Any] = {}
    with Writers(cluster, coll) as writers:
        entered = _hold(dying, step, on=True)
        migrating = _migrate(dying, f"app.{coll}", recipient, outcome)
        _wait_step(dying, step, entered, migrating, outcome)
        ShardedHosts(cluster).kill(dying)
        migrating.join(timeout=30)
        time.sleep(0.5)
    try:
        owner = _check_consistent(cluster, coll, writers)
    finally:
        cluster.restart_router(dying)
    assert owner == (donor if step < 5 else recipient)
    with MongoClient(living, serverSelectionTimeoutMS=5000) as client:
        assert _owner(client, f"app.{coll}") == owner
    _moves_again(cluster, coll, owner)


def test_a_migration_asked_while_the_config_servers_have_no_primary_waits_for_the_next(
    cluster: ShardedSandbox,
) -> None:
    """Asked just after the config servers' primary is killed, a migration waits for their
    next primary (mongos waits for a config primary within its server selection), then moves
    the range; writes to it go on meanwhile, each once."""
    coll = "config_down"
    router = cluster.spec.routers[0]
    with MongoClient(cluster.uri, serverSelectionTimeoutMS=20_000) as client:
        _, recipient = _prepare(cluster, client, coll)
    config = cluster.sets["configRS"]
    outcome: dict[str, Any] = {}
    with Writers(cluster, coll) as writers:
        victim = config.resolve("primary")
        config.kill(victim)
        migrating = _migrate(router, f"app.{coll}", recipient, outcome)
        others = [m.host for m in config.spec.members if m.host != victim.host]
        deadline, elected = time.monotonic() + 60, False
        while migrating.is_alive() and time.monotonic() < deadline:
            # Polled more often than the steps after a migration's commit take.
            elected = elected or any(is_writable_primary(h, ConnectOptions()) for h in others)
            time.sleep(0.005)
        assert not migrating.is_alive()
    config.start(victim)
    assert "error" not in outcome, outcome
    assert elected, "the migration ended before the config servers had a new primary"
    assert _check_consistent(cluster, coll, writers) == recipient
