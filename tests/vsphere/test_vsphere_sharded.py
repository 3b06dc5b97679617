"""A sharded cluster on vSphere that rsdrill did not build (`platform: vsphere`, `topology:
sharded`): found from the routers in `target.uri`, every member and router mapped to a vcsim VM
on one of the cluster's four ESXi hosts. The host-failure guard counts each replica set's own
majority (two of a shard's three members on one ESXi host refuse a `scope: host` kill; spread,
it is accepted); and with every VM bound to its process (tests/harness/vsphere_binding.py: a VM
powered off kills it, powered on restarts it) a shard primary's VM powered off moves that shard
only."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from harness.vcsim import Vcsim, create_vm, esxi_hosts, wait_task
from harness.vsphere_binding import VmBinding

from rsdrill.engine.options import RunOptions
from rsdrill.engine.runner import run_experiment
from rsdrill.errors import GuardRefusal
from rsdrill.experiment.schema import Experiment
from rsdrill.platforms.vsphere.target import VsphereTarget
from rsdrill.result import Result
from tests.harness import sharded_cluster as cluster
from tests.harness.sharded_cluster import ClusterProcesses

PROBES = {"availability": {"interval": "20ms", "timeout": "250ms", "retries": True}}


@contextmanager
def vms(si: Any, placement: dict[str, int]) -> Iterator[dict[str, Any]]:
    """A powered-on VM per member or router (host:port → its VM) on the ESXi host of the
    given index; powered off and destroyed on the way out."""
    hosts = esxi_hosts(si)
    made: dict[str, Any] = {}
    try:
        for member, index in placement.items():
            name = f"sharded-{member.rsplit(':', 1)[1]}-{secrets.token_hex(3)}"
            made[member] = create_vm(si, name, hosts[index])
        yield made
    finally:
        for vm in made.values():
            if vm.runtime.powerState != "poweredOff":
                wait_task(vm.PowerOffVM_Task())
            wait_task(vm.Destroy_Task())


def experiment(directory: Path, sim: Vcsim, names: dict[str, str],
               faults: list[dict[str, Any]]) -> Experiment:  # fmt: skip
    vsphere = {"host": sim.host, "port": sim.port, "user": sim.user, "insecure": True,
               "task_timeout": "20s", "vms": {"by": "map", "map": names}}  # fmt: skip
    return Experiment.model_validate({
        "name": "vsphere-sharded",
        "target": {"platform": "vsphere", "topology": "sharded", "uri": cluster.uri(directory),
                   "vsphere": vsphere},
        "probes": PROBES, "faults": faults, "observe": {"after_revert": "5s"},
    })  # fmt: skip


def run(exp: Experiment, out: Path) -> Result:
    return run_experiment(exp, RunOptions(out_dir=out / "out", live=False, journal_dir=out,
                                          assume_yes=True))  # fmt: skip


@pytest.fixture(autouse=True)
def no_allow_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RSDRILL_ALLOW", raising=False)


def test_a_host_failure_taking_a_shards_majority_is_refused_and_spread_it_is_accepted(
    tmp_path: Path, existing_cluster: Path, sim: Vcsim, si: Any
) -> None:
    sets = cluster.sets(existing_cluster)
    routers = cluster.routers(existing_cluster)
    a, b, c = sets["shard0"]
    # shard0's a and b on ESXi host 0 (and b once more on host 2, spread); the config servers
    # and shard1 one member per host; both routers together on host 3 (they hold no votes).
    placement = {a: 0, b: 0, c: 1, **dict(zip(sets["configRS"], (1, 2, 3), strict=True)),
                 **dict(zip(sets["shard1"], (1, 2, 3), strict=True)),
                 **dict.fromkeys(routers, 3)}  # fmt: skip
    failure = {"at": "2s", "kind": "host-kill", "scope": "host", "duration": "3s",
               "select": {"shard": "shard0", "role": "primary"}}  # fmt: skip
    with vms(si, placement) as together, vms(si, {b: 2}) as moved:
        names = {member: vm.name for member, vm in together.items()}
        shared = esxi_hosts(si)[0].name
        exp = experiment(existing_cluster, sim, names, [failure])
        target = VsphereTarget(exp, tmp_path)
        try:
            with pytest.raises(GuardRefusal) as refused:
                target.setup()
        finally:
            target.teardown()
        assert refused.value.guard == "quorum"
        assert refused.value.reason.startswith(
            f"members {', '.join(sorted([a, b]))} run on one ESXi host ({shared}): a host "
            "failure (scope: host) takes 2 of shard0's 3 members down together, a majority."
        ), refused.value.reason
        # The run says so before anything is injected: every VM still runs.
        result = run(exp, tmp_path / "together")
        assert result.verdict == "aborted" and result.faults == []
        assert result.error is not None and "2 of shard0's 3 members" in result.error
        assert all(vm.runtime.powerState == "poweredOn" for vm in together.values())
        # b on a host of its own: no set has a majority on one host, the routers' don't count.
        spread = experiment(existing_cluster, sim, {**names, b: moved[b].name}, [failure])
        target = VsphereTarget(spread, tmp_path)
        try:
            target.setup()
            assert target.vms == {**names, b: moved[b].name}
        finally:
            target.teardown()


@pytest.mark.slow
def test_a_shard_primarys_vm_powered_off_fails_over_that_shard_only(
    tmp_path: Path, existing_cluster: Path, sim: Vcsim, si: Any
) -> None:
    sets = cluster.sets(existing_cluster)
    routers = cluster.routers(existing_cluster)
    every = [h for hosts in sets.values() for h in hosts]
    # Round the four ESXi hosts: each set's members on three different ones.
    placement = {h: i % len(esxi_hosts(si)) for i, h in enumerate([*every, *routers])}
    kill = {"at": "2s", "kind": "host-kill", "duration": "3s",
            "select": {"shard": "shard1", "role": "primary"}}  # fmt: skip
    with vms(si, placement) as made:
        names = {member: vm.name for member, vm in made.items()}
        bound = {vm._moId: member for member, vm in made.items()}
        exp = experiment(existing_cluster, sim, names, [kill])
        processes = ClusterProcesses(existing_cluster)
        with VmBinding(sim, processes, bound) as binding:  # type: ignore[arg-type]
            result = run(exp, tmp_path)
            killed = result.faults[0].target if result.faults else None
            # The member restarted by its VM's power-on answers again before the binding stops.
            if killed is not None:
                cluster.wait_back_as_secondary(killed)
        powered = {m: vm.runtime.powerState for m, vm in made.items()}
    # The figures, shown with -rP.
    print(
        f"run {result.duration_s:.1f}s;",
        {name: figures.model_dump() for name, figures in result.metrics.shards.items()},
    )
    assert binding.errors == []
    assert result.verdict == "pass", result.error
    assert sorted(result.target.members) == sorted(every)
    (fault,) = result.faults
    assert killed in sets["shard1"] and fault.detail["role"] == "PRIMARY"
    assert fault.verified_at_s is not None and fault.reverted_at_s is not None
    assert made[killed]._moId in fault.detail["plan"], fault.detail["plan"]
    # Its VM only (scope: vm) was powered off, which killed its process; powered on again,
    # it came back.
    assert [(e.member, e.what) for e in binding.events] == [
        (killed, "SIGKILL (VM powered off)"), (killed, "restart (VM on, data disk attached)"),
        (killed, "answering")]  # fmt: skip
    assert set(powered.values()) == {"poweredOn"}, powered
    cluster.assert_only_struck_shard_interrupted(result, sets, "shard1", killed)
    assert result.metrics.recovery_s.get(killed) is not None, result.metrics.recovery_s
