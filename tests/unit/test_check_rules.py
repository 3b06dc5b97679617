"""The rules `rsdrill check` applies to what a server says: versions, topologies, privileges."""

from __future__ import annotations

from typing import Any

import pytest

from rsdrill.analysis.metrics import compute_metrics
from rsdrill.analysis.slo import not_applicable_reason
from rsdrill.deployment import Deployment, topology_of, version_problem, version_tuple
from rsdrill.engine.check import Privilege, needed_privileges, topology_fits
from rsdrill.experiment.schema import Experiment
from rsdrill.history import FaultRecord, Op
from rsdrill.privileges import granted, role_privileges


@pytest.mark.parametrize(
    ("version", "ok"),
    [("4.4.0", True), ("4.4.1-ent", True), ("7.0.12", True), ("8.0.4", True),
     ("8.0.0-rc3", True), ("4.2.24", False), ("3.6.23", False), ("8.2.0", False),
     ("garbage", False), (None, False)],
)  # fmt: skip
def test_versions_outside_44_to_80_are_named(version: str | None, ok: bool) -> None:
    problem = version_problem(version)
    assert (problem is None) is ok
    if not ok and version and version_tuple(version):
        assert version in problem and "4.4 to 8.0" in problem  # type: ignore[operator]


@pytest.mark.parametrize(
    ("hello", "kind"),
    [({"setName": "rs0", "isWritablePrimary": True}, "replica set"),
     ({"isWritablePrimary": True}, "standalone"),
     ({"ismaster": True, "msg": "isdbgrid"}, "sharded"),
     ({"isreplicaset": True, "isWritablePrimary": False}, "replica set (uninitiated)")],
)  # fmt: skip
def test_topology_as_drivers_classify_a_hello(hello: dict[str, Any], kind: str) -> None:
    assert topology_of(hello) == kind


def _deployment(topology: str) -> Deployment:
    return Deployment(topology, None, "7.0.0", "hello", True, None, False, False, None)


def test_a_standalone_fits_rs1_and_standalone_only() -> None:
    standalone, replset = _deployment("standalone"), _deployment("replica set")
    assert topology_fits("rs1", standalone) and topology_fits("standalone", standalone)
    assert not topology_fits("rs3", standalone) and not topology_fits("psa", standalone)
    assert topology_fits("rs3", replset) and not topology_fits("standalone", replset)


def _experiment(**extra: Any) -> Experiment:
    extra.setdefault("faults", [{"at": "1s", "kind": "host-freeze", "duration": "1s"}])
    return Experiment.model_validate(
        {"name": "x", "target": {"platform": "local", "uri": "mongodb://h:1/",
                                 "members": [{"host": "h:1", "start": "true"}]}, **extra}
    )  # fmt: skip


CLUSTER_MONITOR = {"resource": {"cluster": True},
                   "actions": ["replSetGetStatus", "replSetGetConfig", "serverStatus"]}  # fmt: skip
READ_WRITE = {"resource": {"db": "rsdrill_probe", "collection": ""},
              "actions": ["insert", "find", "update", "remove", "dropCollection"]}  # fmt: skip


def _missing(held: list[dict[str, Any]], exp: Experiment, standalone: bool = False) -> set[str]:
    return {p.action for p in needed_privileges(exp, standalone)
            if p.required and not granted(held, p.resource, p.action)}  # fmt: skip


def test_a_user_without_cluster_monitor_lacks_replset_get_status() -> None:
    exp = _experiment()
    assert _missing([READ_WRITE], exp) == {"replSetGetStatus", "replSetGetConfig"}
    assert _missing([READ_WRITE, CLUSTER_MONITOR], exp) == set()
    # A standalone has no replica-set status to read.
    assert _missing([READ_WRITE], exp, standalone=True) == set()


def test_a_stepdown_needs_cluster_manager() -> None:
    exp = _experiment(faults=[{"at": "1s", "kind": "stepdown"}])
    assert _missing([READ_WRITE, CLUSTER_MONITOR], exp) == {"replSetStateChange"}


def test_a_forced_reconfig_needs_cluster_manager() -> None:
    exp = _experiment(guards={"allow_quorum_loss": True},
                      recovery={"force_reconfig": {"after": "60s"}})  # fmt: skip
    assert _missing([READ_WRITE, CLUSTER_MONITOR], exp) == {"replSetConfigure"}
    assert _missing([READ_WRITE, *role_privileges("clusterManager", "admin")], exp) == set()


def test_resource_matching_follows_mongodb() -> None:
    oplog = Privilege("local.oplog.rs", "find", "guard", "read@local")
    # "" collection covers the non-system collections only: the oplog must be named.
    assert not granted(
        [{"resource": {"db": "", "collection": ""}, "actions": ["find"]}],
        oplog.resource,
        oplog.action,
    )
    assert granted([{"resource": {"db": "local", "collection": "oplog.rs"},
                      "actions": ["find"]}], oplog.resource, oplog.action)  # fmt: skip
    assert granted(
        [{"resource": {"anyResource": True}, "actions": ["anyAction"]}],
        oplog.resource,
        oplog.action,
    )
    probe = Privilege("rsdrill_probe.", "insert", "probes", "readWrite")
    assert granted(
        [{"resource": {"db": "", "collection": ""}, "actions": ["insert"]}],
        probe.resource,
        probe.action,
    )
    assert not granted([{"resource": {"db": "other", "collection": ""},
                          "actions": ["insert"]}], probe.resource, probe.action)  # fmt: skip
    assert not granted(
        [{"resource": {"cluster": True}, "actions": ["insert"]}], probe.resource, probe.action
    )


def test_slos_on_replica_set_metrics_are_refused_for_a_standalone() -> None:
    reason = not_applicable_reason("failover_s", standalone=True)
    assert reason is not None and "standalone" in reason
    assert not_applicable_reason("failover_s", standalone=False) is None
    assert not_applicable_reason("write_unavailable_s", standalone=True) is None


def test_a_standalones_replica_set_metrics_are_not_applicable_not_zero() -> None:
    fault = FaultRecord(0, "host-kill", "h:1", injected_at_s=1.0, reverted_at_s=3.0)
    ops = [
        Op("failover", "hello", "h:1", 0.0, 0.01, "ok", {"writable": True}),
        Op("failover", "hello", "h:1", 1.1, 1.2, "error", {"error": "refused"}),
        Op("failover", "hello", "h:1", 3.5, 3.51, "ok", {"writable": True}),
        Op("recovery", "status", "h:1", 3.5, 3.51, "ok", {"state": "STANDALONE"}),
        Op("recovery", "status", "h:1", 2.0, 2.01, "error", {"error": "refused"}),
    ]
    metrics = compute_metrics(ops, [fault], duration_s=5.0, standalone=True)
    assert metrics.failover_s is None and metrics.replication_lag_max_s is None
    assert "failover_s" in metrics.not_applicable
    # A standalone server serving again is recovered.
    assert metrics.recovery_s["h:1"] is not None
    assert compute_metrics(ops, [fault], duration_s=5.0).not_applicable == []


def _sharded(**guards: Any) -> Experiment:
    return Experiment.model_validate({
        "name": "x", "guards": guards,
        "target": {"platform": "local", "topology": "sharded", "uri": "mongodb://r:1/",
                   "members": [{"host": "h:1", "start": "true"}]},
        "faults": [{"at": "1s", "kind": "host-freeze", "duration": "1s",
                    "select": {"shard": "any", "role": "secondary"}}],
    })  # fmt: skip


def test_stopping_the_balancer_needs_update_on_config_settings() -> None:
    """MongoDB's balancerStop and balancerStart check update, balancerStatus find, on
    config.settings: clusterManager grants both, clusterMonitor only the reading."""
    monitor = role_privileges("clusterMonitor", "admin")
    held = [READ_WRITE, *monitor, *role_privileges("clusterManager", "admin")]
    assert _missing([READ_WRITE, *monitor], _sharded()) == set()
    assert _missing([READ_WRITE, *monitor], _sharded(stop_balancer=True)) == {"update"}
    assert _missing(held, _sharded(stop_balancer=True)) == set()
    assert _missing([READ_WRITE, *role_privileges("clusterAdmin", "admin")],
                    _sharded(stop_balancer=True)) == set()  # fmt: skip
    (control,) = {p.used_by for p in needed_privileges(_sharded(stop_balancer=True), False)
                  if p.resource == "config.settings"}  # fmt: skip
    assert control.startswith("balancer control")
