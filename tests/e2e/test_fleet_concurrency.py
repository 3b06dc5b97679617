"""Twenty `rsdrill run`s at once against four replica sets, sharing one FerretDB store: each run
is in the shared history, no two ever ran on one set at the same time (by the history, and by
the elections the members themselves logged), and a holder killed on "another machine" (a
UTS namespace of its own) gives up its cluster only when its lease's TTL has run out."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from rsdrill.fleet.store import MongoFleetStore
from rsdrill.sandbox.cluster import EmulatorEngine, Sandbox, up
from rsdrill.sandbox.config import Settings, build_topology, member_dir
from rsdrill.sandbox.groundtruth import read_events
from rsdrill.store import shared_history
from tests.harness.cli import CLI, Rsdrill
from tests.harness.ferretdb import FerretDB, ferretdb
from tests.harness.members import wait_until

pytestmark = pytest.mark.slow

CLUSTERS = 4
RUNS_PER_CLUSTER = 5
KEY = "fleet-key-for-the-concurrency-test"


@pytest.fixture
def fleet(
    tmp_path: Path, free_port_base: Callable[[int], int]
) -> Iterator[tuple[FerretDB, list[Sandbox]]]:
    with ExitStack() as stack:
        server = stack.enter_context(ferretdb(tmp_path / "ferretdb"))
        sets = []
        for n in range(CLUSTERS):
            spec = build_topology("rs3", port_base=free_port_base(3), set_name=f"rs{n}",
                                  settings=Settings(election_timeout_ms=1000))  # fmt: skip
            sandbox = up(tmp_path / f"set-{n}", spec, EmulatorEngine())
            stack.callback(sandbox.down)
            sets.append(sandbox)
        yield server, sets


def _experiment(tmp_path: Path, n: int, sandbox: Sandbox, fault_at: str = "1s") -> Path:
    members = ", ".join(f"{{host: '{m.host}', start: 'false'}}" for m in sandbox.spec.members)
    seeds = ",".join(m.host for m in sandbox.spec.members)
    # Two sets named by their files, two by what is found (the set's name and members).
    cluster = f"cluster: staging-{n}, " if n % 2 == 0 else ""
    path = tmp_path / f"set-{n}-{fault_at}.yaml"
    path.write_text(
        f"name: fleet-freeze-{n}\n"
        f"target: {{platform: local, topology: rs3, {cluster}"
        f"uri: 'mongodb://{seeds}/?replicaSet=rs{n}', members: [{members}]}}\n"
        "probes:\n  availability: {interval: 20ms}\n"
        f"faults:\n  - {{at: {fault_at}, kind: host-freeze, select: primary, duration: 2s}}\n"
        "observe: {after_revert: 1s}\n"
    )
    return path


def _env(tmp_path: Path, server: FerretDB) -> dict[str, str]:
    return {**os.environ, "RSDRILL_HOME": str(tmp_path / "home"),
            "RSDRILL_HISTORY": f"mongodb://{server.host}/fleet", "RSDRILL_FLEET_KEY": KEY,
            "RSDRILL_ALLOW": ",".join(f"rs{n}" for n in range(CLUSTERS))}  # fmt: skip


def _run_args(path: Path, out: Path) -> list[str]:
    return ["run", str(path), "--out", str(out), "--no-live", "--lease-wait", "300"]


def test_twenty_runs_on_four_sets_never_overlap_and_a_dead_holder_s_lease_expires(
    tmp_path: Path, fleet: tuple[FerretDB, list[Sandbox]]
) -> None:
    server, sets = fleet
    env = _env(tmp_path, server)
    store = MongoFleetStore(env["RSDRILL_HISTORY"])
    began = time.time()

    # A run on another machine takes set 0 and dies holding it (its fault not yet due).
    held_cluster = "staging-0"  # the cluster set 0's file names: its lease
    holder = subprocess.Popen(
        ["unshare", "--uts", "sh", "-c", 'hostname elsewhere && exec "$@"', "sh",
         *CLI, *_run_args(_experiment(tmp_path, 0, sets[0], fault_at="60s"),
                          tmp_path / "holder")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
    )  # fmt: skip
    try:
        held = wait_until(lambda: store.lease(held_cluster), 60, "the holder's lease")
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert held["host"] == "elsewhere"
    killed = time.time()
    expires = store.lease(held_cluster)["until"]  # as last renewed before the kill

    runs = []
    for n, sandbox in enumerate(sets):
        path = _experiment(tmp_path, n, sandbox)
        for i in range(RUNS_PER_CLUSTER):
            out = tmp_path / "out" / f"set-{n}-{i}"
            out.mkdir(parents=True)
            with (out / "output.txt").open("w") as log:
                proc = Rsdrill(_run_args(path, out), stdout=log, stderr=subprocess.STDOUT,
                               env=env)  # fmt: skip
            runs.append((n, out, proc))
    try:
        codes = [(n, out, proc.wait(timeout=420)) for n, out, proc in runs]
    finally:
        for _, _, proc in runs:
            if proc.poll() is None:
                proc.kill()
    for n, out, code in codes:
        assert code == 0, f"a run on set {n} exited {code}:\n{(out / 'output.txt').read_text()}"

    history = [r for r in shared_history(env["RSDRILL_HISTORY"])
               if r.started_at.timestamp() >= began]  # fmt: skip
    assert len(history) == CLUSTERS * RUNS_PER_CLUSTER, [r.experiment for r in history]
    for n, sandbox in enumerate(sets):
        mine = [r for r in history if r.experiment == f"fleet-freeze-{n}"]
        assert len(mine) == RUNS_PER_CLUSTER
        seeds = ",".join(sorted(m.host for m in sandbox.spec.members))
        assert {r.cluster for r in mine} == {f"staging-{n}" if n % 2 == 0 else f"rs{n}@{seeds}"}
        # From its probes' start to its end, as each run's result says (its lease held).
        spans = sorted(_span(json.loads((r.out_dir / "result.json").read_text()))
                       for r in mine)  # fmt: skip
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert end <= start, f"set {n}: two runs at once: {spans}"
        # Each run took the cluster's lease anew: a new generation each, none skipped (the
        # dead holder's was the first on set 0).
        leased = f"staging-{n}" if n % 2 == 0 else seeds  # named, or the hosts named
        assert store.lease(leased) is None  # the last run let go
        assert store._newest(leased)["gen"] == RUNS_PER_CLUSTER + int(n == 0)
        # The members' own account: every election after the holder died falls inside one of
        # this set's runs, and each run (its primary frozen) saw one.
        won = [e["t_wall"] for m in sandbox.spec.members
               for e in read_events(member_dir(sandbox.directory, m) / "events.jsonl")
               if e["event"] == "election_won" and e["t_wall"] > killed]  # fmt: skip
        for t in won:
            assert any(start <= t <= end for start, end in spans), (n, t, spans)
        for start, end in spans:
            assert any(start <= t <= end for t in won), (n, start, end, won)
        if n == 0:
            # The dead holder was on another machine: its lease ran out first.
            assert spans[0][0] >= expires, (dt.datetime.fromtimestamp(expires), spans[0])


def _span(result: dict[str, Any]) -> tuple[float, float]:
    t0 = result["clock"]["t0_wall"]
    return t0, t0 + result["duration_s"]
