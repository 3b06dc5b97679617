"""Transactions that write on two shards, through the routers, committed with MongoDB's
two-phase commit: each shard's part prepared (its own oplog entry, majority-committed), the
decision made by a coordinator on the first participant's primary and kept in
`config.transaction_coordinators`, each part committed at one commit timestamp. Checked on
each shard's primary directly, never by the router's word; faults: a statement failing on the
second shard, the coordinator's primary killed before its decision (retried, or with nobody
asking again), a participant's primary killed while prepared or before it prepared."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pymongo import MongoClient, WriteConcern
from pymongo.client_session import ClientSession
from pymongo.errors import ExecutionTimeout, OperationFailure, PyMongoError
from pymongo.read_concern import ReadConcern

from rsdrill.sandbox.config import Settings
from rsdrill.sandbox.sharded import ShardedSandbox, up_sharded
from tests.harness.members import wait_until
from tests.harness.sharded_cluster import ELECTION_TIMEOUT_MS, describe

pytestmark = pytest.mark.timeout(240)

NS_DB, NS_COLL = "bank", "acct"
TXN = {"read_concern": ReadConcern("snapshot"), "write_concern": WriteConcern("majority")}
Client = MongoClient[dict[str, Any]]


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, free_port_base: Callable[[int], int]
) -> Iterator[ShardedSandbox]:
    directory = tmp_path_factory.mktemp("twophase")
    sandbox = up_sharded(directory, port_base=free_port_base(3 + 2 * 3 + 2),
                         settings=Settings(election_timeout_ms=ELECTION_TIMEOUT_MS),
                         balancer=False)  # fmt: skip
    try:
        yield sandbox
    finally:
        sandbox.down(grace_s=2.0)


@pytest.fixture(scope="module")
def client(cluster: ShardedSandbox) -> Iterator[Client]:
    with MongoClient(cluster.uri, serverSelectionTimeoutMS=30_000) as c:
        c.admin.command("shardCollection", f"{NS_DB}.{NS_COLL}", key={"_id": "hashed"})
        c[NS_DB][NS_COLL].insert_many([{"_id": i, "v": []} for i in range(40)])
        yield c


@pytest.fixture(autouse=True)
def _described_on_failure(request: pytest.FixtureRequest, cluster: ShardedSandbox
                          ) -> Iterator[None]:  # fmt: skip
    failed = request.session.testsfailed
    yield
    if request.session.testsfailed > failed:  # this test's call failed: shown with it
        print(describe(cluster))


class Keys:
    """Unused document ids on each shard, handed out one pair per test."""

    def __init__(self, cluster: ShardedSandbox) -> None:
        self.free: dict[str, list[int]] = {}
        for name in cluster.spec.shards:
            with _direct(cluster, name) as direct:
                ids = sorted(d["_id"] for d in direct[NS_DB][NS_COLL].find({}, {"_id": 1}))
            self.free[name] = ids

    def pair(self) -> tuple[int, int]:
        return self.free["shard0"].pop(), self.free["shard1"].pop()


@pytest.fixture(scope="module")
def keys(cluster: ShardedSandbox, client: Client) -> Keys:
    return Keys(cluster)


def _direct(cluster: ShardedSandbox, shard: str) -> Client:
    return MongoClient(cluster.sets[shard].uri, serverSelectionTimeoutMS=30_000)


def _on_shard(cluster: ShardedSandbox, shard: str, doc_id: int) -> list[int]:
    with _direct(cluster, shard) as direct:
        doc = direct[NS_DB][NS_COLL].find_one({"_id": doc_id})
    assert doc is not None
    return list(doc["v"])


def _txn_entries(cluster: ShardedSandbox, shard: str, session: ClientSession) -> list[Any]:
    """The shard primary's oplog entries of the session's transaction, oldest first."""
    with _direct(cluster, shard) as direct:
        return list(direct.local["oplog.rs"].find({"lsid": session.session_id}))


def _primary(cluster: ShardedSandbox, shard: str) -> Any:
    return cluster.sets[shard].resolve("primary")


def _session(cluster: ShardedSandbox, client: Client) -> ClientSession:
    """A session causally after each shard primary's newest write, so that its transaction's
    snapshot holds the documents the test writes: a router that has not seen them yet (the
    other one served the inserts) picks an older time, as mongos may, and the statements
    then match nothing (an empty prepare, unheld)."""
    session = client.start_session()
    for shard in ("shard0", "shard1"):
        with _direct(cluster, shard) as direct:
            reply = direct.admin.command("ping")
        session.advance_cluster_time(reply["$clusterTime"])
        session.advance_operation_time(reply["operationTime"])
    return session


def _push_both(client: Client, session: ClientSession, a: int, b: int, value: int) -> None:
    coll = client[NS_DB][NS_COLL]
    coll.update_one({"_id": a}, {"$push": {"v": value}}, session=session)  # shard0 first:
    coll.update_one({"_id": b}, {"$push": {"v": value}}, session=session)  # the coordinator


def _coordinator_docs(cluster: ShardedSandbox) -> int:
    with _direct(cluster, "shard0") as direct:
        return direct.config["transaction_coordinators"].count_documents({})


def test_a_transaction_on_two_shards_is_prepared_on_each_then_committed_at_one_timestamp(
    cluster: ShardedSandbox, client: Client, keys: Keys
) -> None:
    a, b = keys.pair()
    with _session(cluster, client) as session:
        with session.start_transaction(**TXN):
            _push_both(client, session, a, b, 1)
        prepares, commits = [], []
        for shard in ("shard0", "shard1"):
            entries = _txn_entries(cluster, shard, session)
            prepares += [e for e in entries if e["o"].get("prepare")]
            commits += [e for e in entries if "commitTransaction" in e["o"]]
    assert _on_shard(cluster, "shard0", a) == [1] and _on_shard(cluster, "shard1", b) == [1]
    assert len(prepares) == 2 and len(commits) == 2, (prepares, commits)
    # One commit timestamp on both shards: the later of the two prepare timestamps.
    assert {c["o"]["commitTimestamp"] for c in commits} == {max(p["ts"] for p in prepares)}
    wait_until(lambda: _coordinator_docs(cluster) == 0, 10, "the coordinator's document gone")


def test_a_statement_failing_on_the_second_shard_aborts_the_first_shard_s_part(
    client: Client, cluster: ShardedSandbox, keys: Keys
) -> None:
    a, b = keys.pair()
    coll = client[NS_DB][NS_COLL]
    with _session(cluster, client) as session:
        session.start_transaction(**TXN)
        coll.update_one({"_id": a}, {"$push": {"v": 7}}, session=session)
        with pytest.raises(OperationFailure) as failed:
            coll.insert_one({"_id": b}, session=session)  # exists on shard1: DuplicateKey
        assert failed.value.code == 11000
        # The router aborted shard0's part at once (as mongos): a write to its document
        # outside the transaction is not held until the transaction's lifetime ends.
        started = time.monotonic()
        client[NS_DB].command("update", NS_COLL, updates=[{"q": {"_id": a},
                              "u": {"$push": {"v": 8}}}], maxTimeMS=5_000)  # fmt: skip
        held_s = time.monotonic() - started
        session.abort_transaction()
    assert held_s < 5.0
    assert _on_shard(cluster, "shard0", a) == [8]  # 7 was never committed


def test_snapshot_reads_never_see_half_of_a_transaction_on_two_shards(
    cluster: ShardedSandbox, client: Client, keys: Keys
) -> None:
    a, b = keys.pair()
    coll = client[NS_DB][NS_COLL]
    stop = threading.Event()
    seen: list[tuple[int, int]] = []
    errors: list[BaseException] = []

    def write() -> None:
        with _session(cluster, client) as session:
            for i in range(60):
                try:
                    session.with_transaction(lambda s, i=i: _push_both(client, s, a, b, i),
                                             **TXN)  # fmt: skip
                except PyMongoError as exc:
                    errors.append(exc)
        stop.set()

    def read() -> None:
        with _session(cluster, client) as session:
            while not stop.is_set():
                with session.start_transaction(read_concern=ReadConcern("snapshot")):
                    first = coll.find_one({"_id": a}, session=session)
                    second = coll.find_one({"_id": b}, session=session)
                assert first is not None and second is not None
                seen.append((len(first["v"]), len(second["v"])))

    threads = [threading.Thread(target=write), threading.Thread(target=read)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert len(seen) >= 20, len(seen)
    halves = [s for s in seen if s[0] != s[1]]
    assert not halves, f"{len(halves)} of {len(seen)} reads saw one shard's part: {halves[:5]}"
    assert seen[-1] == (60, 60) or coll.find_one({"_id": a})["v"] == list(range(60))


def _hold_decision(cluster: ShardedSandbox, on: bool) -> int:
    """MongoDB's hangBeforeWritingDecision on each running member of shard0, so whichever is
    primary when the transaction commits (the coordinator) holds its decision, even after an
    election the test did not make (a member starved on a loaded machine); how many times
    they had reached it."""
    entered = 0
    shard0 = cluster.sets["shard0"]
    for member in shard0.spec.members:
        if shard0.pid(member) is None:
            continue  # killed by the test
        with MongoClient(member.host, directConnection=True) as one:
            reply = one.admin.command("configureFailPoint", "hangBeforeWritingDecision",
                                      mode="alwaysOn" if on else "off")  # fmt: skip
        entered += int(reply["count"])
    return entered


def _commit_in_background(cluster: ShardedSandbox, client: Client, a: int, b: int, value: int
                          ) -> tuple[threading.Thread, list[Any]]:  # fmt: skip
    """A transaction on both shards whose commit runs in a thread; its outcome in the list."""
    outcome: list[Any] = []
    session = _session(cluster, client)
    session.start_transaction(**TXN)
    _push_both(client, session, a, b, value)

    def commit() -> None:
        try:
            session.commit_transaction()
            outcome.append("committed")
        except PyMongoError as exc:
            outcome.append(exc)
        finally:
            session.end_session()

    thread = threading.Thread(target=commit)
    thread.start()
    return thread, outcome


def _prepares(cluster: ShardedSandbox) -> dict[str, int]:
    """How many prepare entries each shard primary's oplog holds."""
    counts = {}
    for shard in ("shard0", "shard1"):
        with _direct(cluster, shard) as direct:
            counts[shard] = len(list(direct.local["oplog.rs"].find({"o.prepare": True})))
    return counts


def _prepared_on_both(cluster: ShardedSandbox, before: dict[str, int]) -> bool:
    return all(n > before[s] for s, n in _prepares(cluster).items())


def _decision_held(cluster: ShardedSandbox, entered: int) -> None:
    """Until shard0's coordinator holds its decision: both shards voted, that is each one's
    prepare entry is majority-committed (an entry merely written could yet be rolled back)."""
    wait_until(lambda: _hold_decision(cluster, True) > entered, 20, "the decision held")


def _primary_or_none(cluster: ShardedSandbox, shard: str) -> Any:
    try:
        return _primary(cluster, shard)
    except Exception:
        return None


def _restart(cluster: ShardedSandbox, shard: str, member: Any) -> None:
    if cluster.sets[shard].pid(member) is not None:
        return  # not killed: the test failed before (it may still be the primary)
    cluster.sets[shard].start(member)
    wait_until(lambda: any(s.name == member.host and s.state == "SECONDARY"
                           for s in cluster.sets[shard].status()), 60,
               f"{member.host} back as a secondary")  # fmt: skip


@pytest.mark.parametrize("asked_again", [True, False], ids=["commit-retried", "router-killed"])
def test_a_coordinator_killed_before_its_decision_is_replaced_by_its_shard_s_next_primary(
    cluster: ShardedSandbox, client: Client, keys: Keys, asked_again: bool
) -> None:
    a, b = keys.pair()
    entered = _hold_decision(cluster, True)
    coordinator = _primary(cluster, "shard0")
    before = _prepares(cluster)
    router = cluster.spec.routers[0]
    uri = cluster.uri if asked_again else f"mongodb://{router}/"
    # Alone with a dead router, the driver's retried commit ends at server selection.
    with MongoClient(uri, retryWrites=asked_again, serverSelectionTimeoutMS=3_000) as committer:
        try:
            thread, outcome = _commit_in_background(cluster, committer, a, b, 41)
            wait_until(lambda: _prepared_on_both(cluster, before), 20, "both parts prepared")
            _decision_held(cluster, entered)
            coordinator = _primary(cluster, "shard0")
            # Prepared, undecided: a snapshot read of shard1's document at its newest time
            # waits (mongod's prepare conflict).
            with _direct(cluster, "shard1") as direct, direct.start_session(snapshot=True) as \
                    reader, pytest.raises(ExecutionTimeout):  # fmt: skip
                direct[NS_DB][NS_COLL].find({"_id": b}, session=reader).max_time_ms(300).to_list()
            cluster.sets["shard0"].kill(coordinator)  # its fail point dies with it
            _hold_decision(cluster, False)  # and the next primary's is lifted
            if not asked_again:
                cluster.kill_router(router)
            thread.join(90)
            assert not thread.is_alive()
            if asked_again:  # the router's and driver's retried commit joined the next primary's
                assert outcome == ["committed"], outcome
            else:  # nobody asks again: the next primary goes on from the document by itself
                assert isinstance(outcome[0], PyMongoError), outcome
            wait_until(lambda: _on_shard(cluster, "shard0", a) == [41], 30, "shard0 committed")
            assert _on_shard(cluster, "shard1", b) == [41]
            wait_until(lambda: _coordinator_docs(cluster) == 0, 20, "the coordinator document gone")
        finally:
            _hold_decision(cluster, False)  # if the test failed before
            cluster.restart_router(router)
            _restart(cluster, "shard0", coordinator)


def test_a_participant_killed_while_prepared_commits_on_its_next_primary(
    cluster: ShardedSandbox, client: Client, keys: Keys
) -> None:
    a, b = keys.pair()
    entered = _hold_decision(cluster, True)
    participant = _primary(cluster, "shard1")
    before = _prepares(cluster)
    try:
        thread, outcome = _commit_in_background(cluster, client, a, b, 42)
        wait_until(lambda: _prepared_on_both(cluster, before), 20, "both parts prepared")
        _decision_held(cluster, entered)
        participant = _primary(cluster, "shard1")
        cluster.sets["shard1"].kill(participant)
        wait_until(lambda: _primary_or_none(cluster, "shard1") not in (None, participant), 30,
                   "a new shard1 primary")  # fmt: skip
        # The prepared part survived the failover: the decision commits it on the new primary.
        _hold_decision(cluster, False)
        thread.join(90)
        assert outcome == ["committed"], outcome
        assert _on_shard(cluster, "shard1", b) == [42]
        assert _on_shard(cluster, "shard0", a) == [42]
    finally:
        _hold_decision(cluster, False)
        _restart(cluster, "shard1", participant)


def test_a_participant_that_lost_its_part_before_the_prepare_aborts_the_whole_transaction(
    cluster: ShardedSandbox, client: Client, keys: Keys
) -> None:
    a, b = keys.pair()
    participant = _primary(cluster, "shard1")
    session = _session(cluster, client)
    try:
        session.start_transaction(**TXN)
        _push_both(client, session, a, b, 43)
        cluster.sets["shard1"].kill(participant)  # its part, not prepared, dies with it
        wait_until(lambda: _primary_or_none(cluster, "shard1") not in (None, participant), 30,
                   "a new shard1 primary")  # fmt: skip
        with pytest.raises(OperationFailure) as failed:
            session.commit_transaction()
        # NoSuchTransaction from the vote, labelled so that the client may run it again.
        assert failed.value.code == 251
        assert failed.value.has_error_label("TransientTransactionError")
        assert _on_shard(cluster, "shard0", a) == [] and _on_shard(cluster, "shard1", b) == []
        # shard0's prepared part was aborted by the decision: its document is not held.
        client[NS_DB].command("update", NS_COLL, updates=[{"q": {"_id": a},
                              "u": {"$push": {"v": 44}}}], maxTimeMS=5_000)  # fmt: skip
        assert _on_shard(cluster, "shard0", a) == [44]
    finally:
        session.end_session()
        _restart(cluster, "shard1", participant)


def test_a_first_statement_too_old_for_a_restarted_shard_starts_the_transaction_again(
    cluster: ShardedSandbox, keys: Keys
) -> None:
    """A router picks the newest cluster time it knows as the transaction's snapshot; a shard
    whose every member restarted since keeps no history before its restart (as mongod after
    a restart). As mongos, the router runs the first statement again at a later time instead
    of failing the client's transaction with SnapshotTooOld."""
    a, b = keys.pair()
    router = cluster.spec.routers[1]
    with MongoClient(f"mongodb://{router}/", serverSelectionTimeoutMS=30_000) as routed:
        routed[NS_DB][NS_COLL].find_one({"_id": a})  # the router learns shard0's time
        seen = routed.admin.command("ping")["$clusterTime"]["clusterTime"]
        time.sleep(1.1)  # a later second: the shard's next entry is newer than the router knows
        with _direct(cluster, "shard0") as direct:
            direct[NS_DB][NS_COLL].update_one({"_id": a}, {"$set": {"w": 1}})
        shard0 = cluster.sets["shard0"]
        for member in shard0.spec.members:
            shard0.kill(member)
        for member in shard0.spec.members:
            shard0.start(member)
        wait_until(lambda: _primary_or_none(cluster, "shard0") is not None, 60, "shard0 primary")
        # What the router would have met: shard0 refuses to read at the router's time.
        concern = {"level": "snapshot", "atClusterTime": seen}
        with _direct(cluster, "shard0") as direct, pytest.raises(OperationFailure) as old:
            direct[NS_DB].command("find", NS_COLL, filter={"_id": a}, readConcern=concern)
        assert old.value.code == 239, old.value
        with routed.start_session() as session, session.start_transaction(**TXN):
            _push_both(routed, session, a, b, 45)
    assert _on_shard(cluster, "shard0", a) == [45] and _on_shard(cluster, "shard1", b) == [45]
