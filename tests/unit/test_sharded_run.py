"""A sharded target's selection (engine.selection) and per-set figures (analysis.sharded), from
hand-written states and histories."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from rsdrill.analysis.metrics import compute_metrics
from rsdrill.engine.selection import SelectionError, lands_in, resolve
from rsdrill.experiment.cluster_fit import misfit
from rsdrill.experiment.schema import Experiment, SelectRouter, SelectShard
from rsdrill.history import FaultRecord, Op, shard_write_probe
from rsdrill.layout import CONFIG, ShardedLayout, same_set
from tests.unit.test_analysis_failover import polls

LAYOUT = ShardedLayout(
    config=("c1:1", "c2:1", "c3:1"),
    shards={"shard0": ("a1:1", "a2:1", "a3:1"), "shard1": ("b1:1", "b2:1", "b3:1")},
    routers=("r1:1", "r2:1"),
)
STATES = {
    "c1:1": "SECONDARY", "c2:1": "PRIMARY", "c3:1": "SECONDARY",
    "a1:1": "PRIMARY", "a2:1": "SECONDARY", "a3:1": "SECONDARY",
    "b1:1": "SECONDARY", "b2:1": "SECONDARY", "b3:1": "PRIMARY",
    "r1:1": "ROUTER", "r2:1": "ROUTER",
}  # fmt: skip


def test_selections_are_resolved_within_their_own_set() -> None:
    assert resolve(SelectShard(shard="shard1"), STATES, LAYOUT) == ["b3:1"]
    assert resolve(SelectShard(shard="shard0", role="secondary"), STATES, LAYOUT) == ["a2:1"]
    assert resolve("config-primary", STATES, LAYOUT) == ["c2:1"]
    assert resolve(SelectRouter(mongos=2), STATES, LAYOUT) == ["r1:1", "r2:1"]
    # `any`: the first shard that has such a member now.
    electing = {**STATES, "a1:1": "SECONDARY"}
    assert resolve(SelectShard(shard="any"), electing, LAYOUT) == ["b3:1"]


def test_a_selection_nobody_fits_now_says_so() -> None:
    with pytest.raises(SelectionError, match="shard0"):
        resolve(SelectShard(shard="shard0"), {**STATES, "a1:1": "DOWN"}, LAYOUT)
    with pytest.raises(SelectionError, match="only 1 up"):
        resolve(SelectRouter(mongos=2), {**STATES, "r2:1": "DOWN"}, LAYOUT)
    with pytest.raises(SelectionError, match="not a sharded target"):
        resolve(SelectShard(shard="shard0"), STATES)


def _exp(select: object) -> Experiment:
    return Experiment.model_validate({
        "name": "x", "target": {"platform": "sandbox", "topology": "sharded", "port_base": 28000},
        "faults": [{"at": "1s", "kind": "host-kill", "select": select, "duration": "1s"}],
    })  # fmt: skip


def test_guards_count_a_fault_in_the_sets_it_can_land_in() -> None:
    fault = _exp({"shard": "shard1"}).faults[0]
    assert [n for n in LAYOUT.sets() if lands_in(fault, n, LAYOUT)] == ["shard1"]
    anywhere = _exp({"shard": "any"}).faults[0]
    assert [n for n in LAYOUT.sets() if lands_in(anywhere, n, LAYOUT)] == ["shard0", "shard1"]
    config = _exp("config-primary").faults[0]
    assert [n for n in LAYOUT.sets() if lands_in(config, n, LAYOUT)] == [CONFIG]
    router = _exp({"mongos": 1}).faults[0]
    assert not any(lands_in(router, n, LAYOUT) for n in LAYOUT.sets())
    member = _exp({"member": "b2:1"}).faults[0]
    assert [n for n in LAYOUT.sets() if lands_in(member, n, LAYOUT)] == ["shard1"]


def _shard_writes(shard: str, start: float, stop: float, down: tuple[float, float]) -> list[Op]:
    n = round((stop - start) / 0.02)
    ops = []
    for k in range(n):
        t = round(start + 0.02 * k, 6)
        ok = not down[0] <= t < down[1]
        ops.append(Op(shard_write_probe(shard), "insert", "r1:1", t, t + 0.005,
                      "ok" if ok else "timeout", {"seq": k}))  # fmt: skip
    return ops


def test_each_set_is_judged_on_its_own_members_and_probe() -> None:
    # shard0's primary a1 is killed at 1 s; a2 is writable from 3 s; shard0's writes through
    # the routers fail from 1 s to 3.5 s. shard1 and the config servers keep their primaries.
    ops = [
        *polls("a1:1", 0, 1, True), *polls("a1:1", 1, 5, None),
        *polls("a2:1", 0, 3, False), *polls("a2:1", 3, 5, True),
        *polls("a3:1", 0, 5, False),
        *polls("b3:1", 0, 5, True), *polls("b1:1", 0, 5, False), *polls("b2:1", 0, 5, False),
        *polls("c2:1", 0, 5, True), *polls("c1:1", 0, 5, False), *polls("c3:1", 0, 5, False),
        *_shard_writes("shard0", 0, 5, (1.0, 3.5)),
        *_shard_writes("shard1", 0, 5, (9, 9)),
    ]  # fmt: skip
    faults = [FaultRecord(0, "host-kill", "a1:1", injected_at_s=1.0, verified_at_s=1.05)]
    sets = {name: list(hosts) for name, hosts in LAYOUT.sets().items()}
    metrics = compute_metrics(ops, faults, duration_s=5, sets=sets)
    shard0, shard1 = metrics.shards["shard0"], metrics.shards["shard1"]
    assert shard0.new_primary == "a2:1"
    assert shard0.failover_s == pytest.approx(2.0, abs=0.15)
    assert shard0.write_unavailable_s == pytest.approx(2.5, abs=0.05)
    # The first write acknowledged after a2 became writable (~2.95-3.0 s) ended at 3.505 s.
    assert shard0.mongos_retarget_s == pytest.approx(0.5, abs=0.1)
    assert shard1.failover_s is None and shard1.write_unavailable_s == pytest.approx(0.02, abs=0.01)
    assert metrics.config_servers is not None and metrics.config_servers.failover_s is None
    # Other sets' primaries are not taken for shard0's new one: the cluster's failover is its.
    assert metrics.failover_s == shard0.failover_s
    assert metrics.no_primary_s == pytest.approx(shard0.no_primary_s)
    # Without the sets, the other shards' primaries would have been taken for a failover.
    assert compute_metrics(ops, faults, duration_s=5).failover_s != shard0.failover_s


def test_a_partition_cuts_a_member_from_its_own_set_and_the_rest_reach_it_as_clients() -> None:
    members = list(LAYOUT.members())
    assert same_set(members, LAYOUT, "b2:1") == ["b1:1", "b2:1", "b3:1"]
    assert same_set(members, LAYOUT, "c1:1") == ["c1:1", "c2:1", "c3:1"]
    assert same_set(members, None, "b2:1") == members  # one replica set: all of it
    assert same_set(members, LAYOUT, "r1:1") == members  # a router is in no set


def _found_cluster_experiment(**changes: object) -> Experiment:
    spec: dict[str, object] = {
        "name": "found",
        "target": {"platform": "local", "topology": "sharded", "uri": "mongodb://r1:1,r2:1/",
                   "members": [{"host": "r1:1", "start": "true"}]},
        "faults": [{"at": "1s", "kind": "host-kill", "select": {"shard": "shard1"},
                    "duration": "1s"}],
    }  # fmt: skip
    return Experiment.model_validate({**spec, **changes})


def test_names_a_found_cluster_has_not_are_told_once_it_is_found() -> None:
    # Loading cannot tell (the shard names are the cluster's own), the found cluster can.
    assert misfit(_found_cluster_experiment(), LAYOUT) is None
    wrong = {"at": "1s", "kind": "host-kill", "select": {"shard": "rs-east"}, "duration": "1s"}
    assert misfit(_found_cluster_experiment(faults=[wrong]), LAYOUT) == (
        "faults[0].select.shard: no shard 'rs-east': the cluster has shard0, shard1 (or any)"
    )
    routers = {**wrong, "select": {"mongos": 3}}
    assert "3 routers, but target.uri names 2" in str(
        misfit(_found_cluster_experiment(faults=[routers]), LAYOUT)
    )
    member = {**wrong, "select": {"member": "x9:1"}}
    assert "x9:1 is no member or router" in str(
        misfit(_found_cluster_experiment(faults=[member]), LAYOUT)
    )
    slo = _found_cluster_experiment(slo={"shards.rs-west.failover_s": "<= 1"})
    assert "slo.shards.rs-west.failover_s: no shard 'rs-west'" in str(misfit(slo, LAYOUT))


def test_a_found_cluster_takes_no_sandbox_shape_and_partitions_by_set() -> None:
    with pytest.raises(ValidationError, match="rsdrill finds the cluster's shards"):
        _found_cluster_experiment(target={
            "platform": "local", "topology": "sharded", "uri": "mongodb://r1:1/", "mongos": 3,
            "members": [{"host": "r1:1", "start": "true"}]})  # fmt: skip
    cut = {"at": "1s", "kind": "network-partition", "select": {"shard": "any"},
           "isolate_from": "all", "duration": "1s"}  # fmt: skip
    assert _found_cluster_experiment(faults=[cut]).faults[0].kind == "network-partition"
    slow = {"at": "1s", "kind": "network-degrade", "select": {"shard": "any"}, "duration": "1s",
            "latency": "10ms"}  # fmt: skip
    with pytest.raises(ValidationError, match="network-degrade on a sharded target is not"):
        _found_cluster_experiment(faults=[slow])
