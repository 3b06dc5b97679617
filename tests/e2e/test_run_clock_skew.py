"""clock-skew on the sandbox: the member's wall clock (hello's localTime, the oplog's times and
so $clusterTime) moves by the offset while elections do not notice; revert sets it right but
timestamps stay monotonic."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from pathlib import Path

import yaml
from pymongo import MongoClient

from rsdrill.connection import ConnectOptions
from rsdrill.engine.actions import carry_out
from rsdrill.engine.runner import RunOptions, run_experiment
from rsdrill.experiment.loader import load_experiment
from rsdrill.platforms.machine.clock import ClockSkew
from rsdrill.sandbox.cluster import EmulatorEngine, up
from rsdrill.sandbox.config import build_topology

EXPERIMENT = Path(__file__).resolve().parents[2] / "experiments" / "primary-clock-skew.yaml"
HOUR = 3600


def _skew_of(client: MongoClient[dict[str, object]]) -> float:
    local = client.admin.command("hello")["localTime"].replace(tzinfo=dt.UTC)
    return (local - dt.datetime.now(dt.UTC)).total_seconds()


def test_the_members_clock_and_cluster_time_move_then_the_clock_comes_back(
    sandbox_dir: Path, free_port_base: Callable[[int], int]
) -> None:
    sandbox = up(sandbox_dir, build_topology("rs1", port_base=free_port_base(1)),
                 EmulatorEngine())  # fmt: skip
    host = sandbox.spec.members[0].host
    with MongoClient(sandbox.uri, directConnection=True) as client:
        coll = client.db.c
        before = client.admin.command("ping")["$clusterTime"]["clusterTime"]
        assert abs(_skew_of(client)) < 2
        skew = ClockSkew(host, HOUR, 0.0, ConnectOptions())
        assert not skew.verify(0.3)  # not injected: the clock is right, not an hour ahead
        skew.inject()
        assert skew.verify(2.0)
        assert abs(_skew_of(client) - HOUR) < 2
        coll.insert_one({"during": True})
        entry = client.local.oplog.rs.find_one({"o.during": True})
        assert entry is not None
        assert entry["ts"].time - before.time > HOUR - 5
        assert abs((entry["wall"].replace(tzinfo=dt.UTC) - dt.datetime.now(dt.UTC))
                   .total_seconds() - HOUR) < 5  # fmt: skip
        ahead = client.admin.command("ping")["$clusterTime"]["clusterTime"]
        assert ahead.time - before.time > HOUR - 5
        # Revert as `rsdrill recover` would, from the journaled action alone.
        action = skew.revert_action()
        assert action is not None
        assert "clock back to real time" in carry_out(action)
        assert abs(_skew_of(client)) < 2
        coll.insert_one({"after": True})
        later = client.local.oplog.rs.find_one({"o.after": True})
        assert later is not None and later["ts"] > entry["ts"]  # never back in time


def test_a_drifting_clock_gains_on_real_time_until_reverted(
    sandbox_dir: Path, free_port_base: Callable[[int], int]
) -> None:
    """clock_drift: the member's clock gains `drift` seconds per second from the injection on
    (here 0.5 s/s: about 1 s in 2 s), and verify follows the drift."""
    sandbox = up(sandbox_dir, build_topology("rs1", port_base=free_port_base(1)),
                 EmulatorEngine())  # fmt: skip
    host = sandbox.spec.members[0].host
    with MongoClient(sandbox.uri, directConnection=True) as client:
        skew = ClockSkew(host, 0.0, 0.5, ConnectOptions())
        skew.inject()
        assert skew.verify(2.0)
        first = _skew_of(client)
        time.sleep(2.0)  # the drift under test is what 2 s of real time adds
        gained = _skew_of(client) - first
        assert 0.6 <= gained <= 1.4, gained
        assert skew.verify(2.0)
        skew.revert()
        assert abs(_skew_of(client)) < 0.5


def test_a_skewed_primary_neither_fails_over_nor_loses_writes(
    tmp_path: Path, free_port_base: Callable[[int], int]
) -> None:
    document = yaml.safe_load(EXPERIMENT.read_text())
    document["target"]["port_base"] = free_port_base(3)
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(document))
    result = run_experiment(load_experiment(path), RunOptions(out_dir=tmp_path / "out",
                                                              live=False))  # fmt: skip
    assert result.verdict == "pass", (result.error, result.slo)
    assert result.metrics.failover_s is None
