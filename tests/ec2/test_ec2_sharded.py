"""A sharded cluster on EC2 that rsdrill did not build (`platform: ec2`, `topology: sharded`):
found from the routers in `target.uri`, every member and router mapped to a moto instance, and
each instance bound to its process (tests/harness/ec2_binding.py: an instance stopped kills its
member or router, started restarts it). A shard primary's instance stopped moves that shard
only; a router with no instance is refused at setup when instances are found by tag, and a
router left out of an explicit map (which the map allows) cannot be faulted, said plainly; the
routers' instances need no data volume for a fault that takes a member's."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from harness.ec2_binding import Ec2Binding
from harness.moto_ec2 import DATA_DEVICE, REGION, Member, data_volume_at, instance_of, make_member

from rsdrill.engine.options import RunOptions
from rsdrill.engine.runner import run_experiment
from rsdrill.experiment.schema import Experiment
from rsdrill.platforms.base import TargetError
from rsdrill.platforms.ec2.acl import AclPartition
from rsdrill.platforms.ec2.injectors import network_partition
from rsdrill.platforms.ec2.target import Ec2Target
from rsdrill.result import Result
from tests.harness import sharded_cluster as cluster
from tests.harness.sharded_cluster import ClusterProcesses

PROBES = {"availability": {"interval": "20ms", "timeout": "250ms", "retries": True}}
KILL = {"at": "2s", "kind": "host-kill", "select": {"shard": "shard0", "role": "primary"},
        "duration": "3s"}  # fmt: skip


@contextmanager
def bound(ec2: Any, directory: Path, hosts: list[str]) -> Iterator[tuple[dict[str, Member],
                                                                      Ec2Binding]]:  # fmt: skip
    """A moto instance (tagged rsdrill:member=host:port) per host, bound to its process."""
    members = {host: make_member(ec2, host) for host in hosts}
    binding = Ec2Binding(ec2, ClusterProcesses(directory), members)  # type: ignore[arg-type]
    with binding:
        yield members, binding


def experiment(directory: Path, endpoint: str, instances: dict[str, Any],
               faults: list[dict[str, Any]], **section: Any) -> Experiment:  # fmt: skip
    ec2 = {"region": REGION, "endpoint_url": endpoint, "instances": instances,
           "poll_interval": "50ms", "wait_timeout": "20s", **section}  # fmt: skip
    return Experiment.model_validate({
        "name": "ec2-sharded",
        "target": {"platform": "ec2", "topology": "sharded", "uri": cluster.uri(directory),
                   "ec2": ec2},
        "probes": PROBES, "faults": faults, "observe": {"after_revert": "5s"},
    })  # fmt: skip


def run(exp: Experiment, tmp_path: Path) -> Result:
    return run_experiment(exp, RunOptions(out_dir=tmp_path / "out", live=False,
                                          journal_dir=tmp_path, assume_yes=True))  # fmt: skip


@pytest.fixture(autouse=True)
def no_allow_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RSDRILL_ALLOW", raising=False)


@pytest.fixture
def existing_cluster(tmp_path: Path, free_port_base: Callable[[int], int]) -> Iterator[Path]:
    """A cluster per test here: instances are found by their member tag, and moto's state
    lives as long as the session, so each test's hosts must be new."""
    with cluster.existing_cluster(tmp_path / "cluster", free_port_base(cluster.SIZE)) as running:
        yield running


@pytest.mark.slow
def test_a_shard_primarys_instance_stopped_fails_over_that_shard_only(
    tmp_path: Path, existing_cluster: Path, moto_endpoint: str, ec2: Any
) -> None:
    sets = cluster.sets(existing_cluster)
    routers = cluster.routers(existing_cluster)
    every = [h for hosts in sets.values() for h in hosts]
    with bound(ec2, existing_cluster, [*every, *routers]) as (members, binding):
        result = run(experiment(existing_cluster, moto_endpoint, {"by": "tag"}, [KILL]),
                     tmp_path)  # fmt: skip
        killed = result.faults[0].target if result.faults else None
        # The member restarted by the instance's start answers again before the binding stops.
        if killed is not None:
            cluster.wait_back_as_secondary(killed)
    # The figures, shown with -rP.
    print(
        f"run {result.duration_s:.1f}s;",
        {name: figures.model_dump() for name, figures in result.metrics.shards.items()},
    )
    assert binding.errors == []
    assert result.verdict == "pass", result.error
    # Every member of every set was found from the routers (none is in the URI).
    assert sorted(result.target.members) == sorted(every)
    (fault,) = result.faults
    assert killed in sets["shard0"] and fault.detail["role"] == "PRIMARY"
    assert fault.verified_at_s is not None and fault.reverted_at_s is not None
    assert fault.detail["plan"].startswith(f"stop (force) {members[killed].instance_id} ")
    # The instance's stop took the process down; its start brought it back on its own data.
    assert [(e.host, e.what) for e in binding.events] == [
        (killed, "killed"), (killed, "restarted-keep")]  # fmt: skip
    assert instance_of(ec2, members[killed].instance_id)["State"]["Name"] == "running"
    cluster.assert_only_struck_shard_interrupted(result, sets, "shard0", killed)
    assert result.metrics.recovery_s.get(killed) is not None, result.metrics.recovery_s


@pytest.mark.slow
def test_a_router_without_an_instance_is_refused_at_setup_or_plainly_at_its_fault(
    tmp_path: Path, existing_cluster: Path, moto_endpoint: str, ec2: Any
) -> None:
    sets = cluster.sets(existing_cluster)
    first, second = cluster.routers(existing_cluster)
    every = [h for hosts in sets.values() for h in hosts]
    mongos = {"at": "1s", "kind": "host-kill", "select": {"mongos": 1}, "duration": "2s"}
    with bound(ec2, existing_cluster, [*every, second]) as (members, binding):
        # Found by tag, every mapped host must have its instance: the first router has none.
        by_tag = experiment(existing_cluster, moto_endpoint, {"by": "tag"}, [KILL])
        with pytest.raises(TargetError) as refused:
            Ec2Target(by_tag, tmp_path).setup()
        assert str(refused.value) == (
            f"ec2: member {first}: 0 instances match tag:rsdrill:member={first}; exactly one must"
        )
        # An explicit map may leave hosts out (they cannot be faulted): setup takes it, and a
        # fault that lands on the left-out router says so, with nothing stopped.
        by_map = {"by": "map", "map": {h: m.instance_id for h, m in members.items()}}
        Ec2Target(experiment(existing_cluster, moto_endpoint, by_map, [mongos]), tmp_path).setup()
        result = run(experiment(existing_cluster, moto_endpoint, by_map, [mongos]),
                     tmp_path / "by-map")  # fmt: skip
    assert result.verdict == "error" and result.faults == []
    assert result.error is not None and result.error.startswith(
        f"member {first} is not in target.ec2.instances.map ("
    ), result.error
    assert binding.events == [] and binding.errors == []
    for host, member in members.items():
        assert instance_of(ec2, member.instance_id)["State"]["Name"] == "running", host


def test_the_routers_instances_need_no_data_volume(
    tmp_path: Path, existing_cluster: Path, moto_endpoint: str, ec2: Any
) -> None:
    """A router holds no data: its instance has no data volume, and an experiment whose fault
    restarts a shard member on a fresh empty volume (which only members' instances need) is
    taken by the preflight (it was refused: "has no volume at /dev/sdf" on a router's)."""
    for router in cluster.routers(existing_cluster):
        disk = make_member(ec2, router)
        ec2.detach_volume(VolumeId=disk.volume_id, InstanceId=disk.instance_id)
    for host in [h for hosts in cluster.sets(existing_cluster).values() for h in hosts]:
        make_member(ec2, host)
    wipe = {"at": "2s", "kind": "host-kill", "duration": "2s", "restart": {"volume": "wipe"},
            "select": {"shard": "shard1", "role": "secondary"}}  # fmt: skip
    exp = experiment(existing_cluster, moto_endpoint, {"by": "tag"}, [wipe],
                     volume={"device": DATA_DEVICE})  # fmt: skip
    target = Ec2Target(exp, tmp_path)
    target.setup()
    assert set(cluster.routers(existing_cluster)) <= set(target.instances)
    # A member's instance without its volume is still refused: the check is not switched off.
    instance = target.instances[cluster.sets(existing_cluster)["shard0"][0]].id
    ec2.detach_volume(VolumeId=data_volume_at(ec2, instance), InstanceId=instance)
    with pytest.raises(TargetError, match="no volume"):
        Ec2Target(exp, tmp_path).setup()


def test_a_partition_from_the_members_cuts_a_shard_member_from_its_own_set_only(
    tmp_path: Path, existing_cluster: Path, moto_endpoint: str, ec2: Any
) -> None:
    """`isolate_from: members` on a sharded target: the member's own set's members are cut
    (network ACL entries in their subnets); the other sets' members and the routers reach it
    as clients do, even from its own subnet (which an ACL cannot filter)."""
    sets = cluster.sets(existing_cluster)
    cut, *peers = sets["shard1"]
    # shard1 one member per subnet; everything else, the routers too, in the cut member's.
    subnets = {**dict(zip(sets["shard1"], (1, 2, 3), strict=True)),
               **{h: 1 for h in [*sets["configRS"], *sets["shard0"],
                                 *cluster.routers(existing_cluster)]}}  # fmt: skip
    for host, subnet in subnets.items():
        make_member(ec2, host, subnet=subnet)
    partition = {"at": "1s", "kind": "network-partition", "isolate_from": "members",
                 "select": {"member": cut}, "duration": "2s"}  # fmt: skip
    exp = experiment(existing_cluster, moto_endpoint, {"by": "tag"}, [partition])
    target = Ec2Target(exp, tmp_path)
    target.setup()
    assert sorted(target.instances) == sorted(subnets)
    injector = network_partition(target, exp.faults[0], cut)
    assert isinstance(injector, AclPartition)
    assert sorted(p.member for p in injector.peers) == sorted(peers)
    assert injector.describe().endswith(
        f"of the subnets of {', '.join(peers)}: established connections are cut too; later "
        "delete those entries"
    ), injector.describe()
