"""The fleet's shared store on a MongoDB-compatible server nobody here wrote (FerretDB): lever
events and leases as documents, one lease winner among runs racing for it, the run history
answering as the SQLite one does (hypothesis), a run pushed later there once; and the CLI: a
shared store without the fleet key refused, `rsdrill lever` engaging, showing and
disengaging it, and `rsdrill run` refusing to start while it is engaged."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import uuid
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pymongo import MongoClient

from rsdrill.fleet import lever
from rsdrill.fleet.lease import ClusterLease, LeaseHeld
from rsdrill.fleet.store import MongoFleetStore
from rsdrill.runs import Run
from tests.harness.cli import rsdrill_run
from tests.harness.ferretdb import FerretDB, ferretdb
from tests.harness.leases import Before, race_after
from tests.unit.test_store import T0

KEY = "fleet-key-for-tests-0123456789"
CLUSTER = "10.0.0.1:27017,10.0.0.2:27017,10.0.0.3:27017"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FerretDB]:
    with ferretdb(tmp_path_factory.mktemp("fleet-ferretdb")) as running:
        yield running


def _uri(server: FerretDB, database: str) -> str:
    return f"mongodb://{server.host}/{database}"


def test_lever_and_leases_as_documents(server: FerretDB) -> None:
    store = MongoFleetStore(_uri(server, "fleet_docs"))
    key = KEY.encode()
    lever.engage(store, key, "incident", by="sre@a")
    store.add_lever_event({"engaged": False, "at": "9999-12-31"})  # no signature: ignored
    now = lever.state(store, key)
    assert now.engaged and now.reason == "incident" and now.ignored == 1
    lever.disengage(store, key, by="sre@a")
    assert not lever.state(store, key).engaged
    holder = ClusterLease(store, key, CLUSTER, "first")
    holder.take()
    with pytest.raises(LeaseHeld, match="experiment 'first'"):
        ClusterLease(store, key, CLUSTER, "second").take()
    holder.release()
    with MongoClient(server.uri) as client:
        # The released generation stays (marked) until the next run takes the cluster.
        assert client["fleet_docs"]["leases"].count_documents({"released": {"$ne": True}}) == 0
        assert client["fleet_docs"]["lever_events"].count_documents({}) == 3


@pytest.mark.parametrize("before", ["none", "expired", "released"])
def test_runs_racing_for_a_cluster_get_one_lease(server: FerretDB, before: Before) -> None:
    """Six runs at once for a cluster nobody holds, whose holder died (its lease expired) or
    whose holder let go: one wins, every round. FerretDB updates a document it found by a
    filter in a second step, so only an insert's unique _id can decide such a race."""
    store = MongoFleetStore(_uri(server, f"fleet_race_{before}"))
    key = KEY.encode()
    for round_ in range(5):
        cluster = f"{CLUSTER}/{round_}"
        make = partial(MongoFleetStore, _uri(server, f"fleet_race_{before}"))
        race_after(store, make, key, cluster, before).release()
        assert store.lease(cluster) is None


def test_a_holder_whose_lease_was_taken_cannot_renew_it(server: FerretDB) -> None:
    store = MongoFleetStore(_uri(server, "fleet_renew"))
    key = KEY.encode()
    stalled = ClusterLease(store, key, CLUSTER, "stalled", ttl_s=-1.0)  # as if it stalled
    first = stalled._stamped()
    assert store.put_lease(CLUSTER, first, replacing=None)
    assert store.put_lease(CLUSTER, stalled._stamped(), replacing=first)  # renewing: its own
    taker = ClusterLease(store, key, CLUSTER, "taker")
    taker.take()  # the stalled holder's lease had expired
    assert not store.put_lease(CLUSTER, stalled._stamped(), replacing=first)
    store.drop_lease(CLUSTER, first["token"])  # the stalled holder's release: no effect
    held = store.lease(CLUSTER)
    assert held is not None and held["experiment"] == "taker"
    taker.release()


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return rsdrill_run([*args], capture_output=True,
                       text=True, timeout=120, env=env)  # fmt: skip


def test_the_lever_through_the_cli_and_a_run_it_keeps_from_starting(
    server: FerretDB, tmp_path: Path
) -> None:
    uri = _uri(server, "fleet_cli")
    env = {**os.environ, "RSDRILL_HOME": str(tmp_path / "home"), "RSDRILL_HISTORY": uri}
    env.pop("RSDRILL_FLEET_KEY", None)
    keyless = _cli("lever", "engage", "--reason", "x", env=env)
    assert keyless.returncode == 2, keyless.stdout + keyless.stderr
    assert "needs the fleet key" in keyless.stderr and "Traceback" not in keyless.stderr
    env["RSDRILL_FLEET_KEY"] = KEY
    engaged = _cli("lever", "engage", "--reason", "payments incident", env=env)
    assert engaged.returncode == 0, engaged.stderr
    shown = _cli("lever", "status", env=env)
    assert shown.returncode == 5 and "payments incident" in shown.stdout, shown.stdout
    experiment = tmp_path / "exp.yaml"
    experiment.write_text(
        "name: held-back\ntarget: {platform: sandbox, topology: rs1}\n"
        "faults:\n  - {at: 1s, kind: host-kill, select: primary, duration: 1s}\n"
    )
    out = tmp_path / "out"
    refused = _cli("run", str(experiment), "--out", str(out), "--no-live", env=env)
    assert refused.returncode == 5, refused.stdout + refused.stderr
    assert "not started" in refused.stderr and "payments incident" in refused.stderr
    assert not out.exists()  # no sandbox, no result: nothing started
    assert _cli("lever", "disengage", env=env).returncode == 0
    assert _cli("lever", "status", env=env).returncode == 0


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(nights=st.lists(st.tuples(st.sampled_from(["rs3-primary-kill", "rs3-stepdown"]),
                                 st.sampled_from(["pass", "fail", "aborted"]),
                                 st.one_of(st.none(), st.floats(0, 60, allow_nan=False)),
                                 st.sampled_from(["", "east-1", "west-2"])),
                       min_size=1, max_size=25))  # fmt: skip
def test_the_shared_history_answers_as_the_sqlite_one(
    server: FerretDB, tmp_path: Path, nights: list[tuple[str, str, float | None, str]]
) -> None:
    """The same runs recorded in a SQLite file and in the shared store: the same history,
    baselines and regressions (their queries are pure functions of what is read back)."""
    from history_sample import make_result, on

    from rsdrill import store

    database = f"prop_{uuid.uuid4().hex[:12]}"
    uri, db = _uri(server, database), tmp_path / f"{database}.sqlite"
    for day, (experiment, verdict, gap, cluster) in enumerate(nights):
        result = on(cluster, make_result(day, gap, experiment=experiment, verdict=verdict))
        store.record(result, tmp_path / f"run-{day}", db)
        store.record_shared(result, tmp_path / f"run-{day}", uri)
    store.record_shared(result, tmp_path / f"run-{day}", uri)  # pushed again: still once
    local, shared = store.history(db), store.shared_history(uri)
    fields = [(r.experiment, r.cluster, r.started_at, r.verdict, r.metrics) for r in local]
    assert [(r.experiment, r.cluster, r.started_at, r.verdict, r.metrics) for r in shared] == fields
    for cluster in ("", "west-2"):
        assert len(store.shared_history(uri, cluster=cluster)) == len(
            store.history(db, cluster=cluster))  # fmt: skip
    since = T0 + dt.timedelta(days=len(nights) // 2)
    assert len(store.shared_history(uri, "rs3-stepdown", since)) == len(
        store.history(db, "rs3-stepdown", since))  # fmt: skip

    def flagged(runs: list[Run]) -> list[tuple[str, str, dt.datetime, str, float]]:
        return [(g.run.experiment, g.run.cluster, g.run.started_at, g.metric, g.value)
                for g in store.regressions(runs, min_history=3)]  # fmt: skip

    assert flagged(shared) == flagged(local)


def test_a_run_recorded_later_is_there_once(server: FerretDB, tmp_path: Path) -> None:
    from history_sample import make_result

    from rsdrill import store

    uri = _uri(server, "fleet_push")
    out = tmp_path / "run"
    out.mkdir()
    (out / "result.json").write_text(make_result(3, 12.5).model_dump_json())
    env = {**os.environ, "RSDRILL_HOME": str(tmp_path / "home")}
    for _ in range(2):
        pushed = _cli("history", "push", str(out), "--db", uri, env=env)
        assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    [run] = store.shared_history(uri)
    assert run.metrics["write_unavailable_s"] == 12.5 and run.out_dir == out.resolve()
    shown = _cli("history", "--db", uri, env=env)
    assert shown.returncode == 0 and "rs3-primary-kill" in shown.stdout, shown.stdout
    gone = "mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=500"
    down = _cli("history", "push", str(out), "--db", gone, env=env)
    assert down.returncode == 4 and "cannot record" in down.stderr, down.stderr
    # One line saying why, not pymongo's description of the whole topology.
    assert "Connection refused" in down.stderr and "Topology" not in down.stderr, down.stderr
