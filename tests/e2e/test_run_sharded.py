"""`rsdrill run` on a sharded sandbox (config servers, two rs3 shards, two routers): faults
selected by shard, on the config servers and on a router; figures per shard."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rsdrill.connection import ConnectOptions, answers_hello
from rsdrill.engine.options import RunOptions
from rsdrill.engine.runner import run_experiment
from rsdrill.experiment.schema import Experiment
from rsdrill.history import History, shard_write_probe
from rsdrill.platforms.machine.actions import REVERT_ACTIONS
from rsdrill.platforms.sandbox.sharded import ShardedHosts
from rsdrill.result import Result
from rsdrill.sandbox.sharded import cluster_size, up_sharded

TARGET = {"platform": "sandbox", "topology": "sharded", "election_timeout": "1s"}
PROBES = {"availability": {"interval": "20ms", "timeout": "250ms", "retries": True}}


def _run(tmp_path: Path, spec: dict[str, Any]) -> Result:
    experiment = Experiment.model_validate({"target": TARGET, "probes": PROBES, **spec})
    return run_experiment(
        experiment, RunOptions(out_dir=tmp_path / "out", live=False, journal_dir=tmp_path)
    )


def test_a_killed_shard_primary_interrupts_that_shard_only(tmp_path: Path) -> None:
    result = _run(tmp_path, {
        "name": "shard0-primary-kill",
        # Beside the writes: list-append transactions over keys hashed onto both shards (most
        # commit by the two-phase commit, some of them coordinated on the killed primary).
        "probes": {**PROBES, "transactions": {"keys": 8, "txn_len": "2-4", "clients": 2}},
        "faults": [{"at": "3s", "kind": "host-kill", "select": {"shard": "shard0"},
                    "duration": "4s"}],
        "observe": {"after_revert": "20s"},
    })  # fmt: skip
    assert result.verdict == "pass", result.error
    shards, members = result.metrics.shards, result.target.members
    killed = result.faults[0].target
    assert killed in members and result.faults[0].detail["role"] == "PRIMARY"
    shard0, shard1 = shards["shard0"], shards["shard1"]
    # The killed shard failed over to another of its own members, and its writes through the
    # routers waited for that; the other shard's went on.
    assert shard0.new_primary is not None and shard0.new_primary != killed
    assert shard0.failover_s is not None and 0.5 < shard0.failover_s < 10
    assert shard0.write_unavailable_s is not None and shard0.write_unavailable_s > 0.5
    assert shard1.failover_s is None
    assert shard1.write_unavailable_s is not None and shard1.write_unavailable_s < 2.0
    # Both shards sampled throughout, at a rate the machine allows: 23-32 writes a second each
    # idle (through the routers, majority-acknowledged), 6-12 on CI's saturated machine.
    assert shard1.writes > 2 * result.duration_s and shard0.writes > 2 * result.duration_s
    assert shard0.mongos_retarget_s is not None and 0 <= shard0.mongos_retarget_s < 5
    assert result.metrics.config_servers is not None
    assert result.metrics.config_servers.failover_s is None
    # The cluster's failover is the killed shard's; members of three sets were polled.
    assert result.metrics.failover_s == shard0.failover_s
    ops = History.read_jsonl(tmp_path / "out" / "history.jsonl").ops()
    failed = {op.probe for op in ops if op.probe.startswith("shard-write:") and not op.ok}
    assert shard_write_probe("shard1") not in failed or shard1.failed_writes < 5
    assert {op.member for op in ops if op.probe == "failover"} == set(members)
    # Snapshot isolation held across the shards through the kill (Elle's method).
    assert result.metrics.transaction_anomalies == 0, result.metrics.transaction_cycles
    assert result.metrics.transactions_checked is not None
    assert result.metrics.transactions_checked > 20


def test_a_router_killed_and_the_config_primary_stepped_down(tmp_path: Path) -> None:
    result = _run(tmp_path, {
        "name": "router-kill-config-stepdown",
        "faults": [
            {"at": "2s", "kind": "host-kill", "select": {"mongos": 1}, "duration": "3s"},
            {"at": "3s", "kind": "stepdown", "select": "config-primary", "duration": "10s"},
        ],
        "observe": {"after_revert": "10s"},
    })  # fmt: skip
    assert result.verdict == "pass", result.error
    router, config_primary = result.faults[0].target, result.faults[1].target
    assert result.faults[0].detail["role"] == "ROUTER"
    assert router in result.target.uri and router not in result.target.members
    assert result.faults[1].detail["role"] == "PRIMARY"
    assert result.faults[0].reverted_at_s is not None  # the router was started again
    config = result.metrics.config_servers
    assert config is not None and config.failover_s is not None
    assert config.new_primary not in (None, config_primary)
    # Two routers in the URI: the driver sends writes to the other one; and writes to
    # existing chunks need no config server.
    for name, shard in result.metrics.shards.items():
        assert shard.write_unavailable_s is not None and shard.write_unavailable_s < 2.0, name
        assert shard.failover_s is None, name
    assert result.metrics.write_unavailable_s is not None
    assert result.metrics.write_unavailable_s < 2.0


def test_recover_restarts_a_killed_router_and_takes_the_cluster_down(
    tmp_path: Path, free_port_base: Callable[[int], int]
) -> None:
    directory = tmp_path / "cluster"
    cluster = up_sharded(directory, port_base=free_port_base(cluster_size(1, "rs1", 1)),
                         shards=1, shard_topology="rs1", routers=1)  # fmt: skip
    try:
        hosts = ShardedHosts(cluster)
        (router,) = cluster.spec.routers
        action = hosts.restart_action(router, wipe=False)
        assert REVERT_ACTIONS[action["action"]](action) == f"{router}: already running"
        hosts.kill(router)
        assert hosts.pid(router) is None
        # What `rsdrill recover` does with the journaled action, from the journal alone.
        assert REVERT_ACTIONS[action["action"]](json.loads(json.dumps(action))) == (
            f"{router}: restarted"
        )
        assert answers_hello(router, options=ConnectOptions())
    finally:
        done = REVERT_ACTIONS["sandbox-down"]({"action": "sandbox-down", "dir": str(directory)})
    assert done.startswith(f"sharded sandbox {directory}: stopped")
    assert cluster.router_pid(router) is None
    assert all(s.status() and all(m.pid is None for m in s.status()) for s in cluster.sets.values())
