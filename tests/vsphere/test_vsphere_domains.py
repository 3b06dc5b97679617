"""Failure domains on vSphere, on a vcsim of this module's own: two clusters of two ESXi hosts
and a standalone host (a compute resource of its own), in one datacenter. An rs3 whose members'
tags say zones east, east, west runs bound to VMs (tests/harness/vsphere_binding.py): a
secondary's alone in cluster DC0_C1, beside a VM of no member on the same ESXi host; the others
on DC0_C0_H0 and on the standalone DC0_H0. A member's zone is its VM's cluster, its region the
datacenter and its tag esxi_host the ESXi host, whatever its replica-set tags say; a zone-outage
powers off the zone's member VMs and powers them on again; a zone no member is in is refused by
the guards, naming those there are; a zone cut off is refused when the file is read."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness.vcsim import Vcsim, create_vm, esxi_hosts, session_of, vcsim
from harness.vsphere_binding import VmBinding

from rsdrill.domains import PlatformPlace
from rsdrill.engine.selection import current_states, placements_for, resolve
from rsdrill.experiment.schema import Experiment, SelectDomain
from rsdrill.platforms.vsphere.target import VsphereTarget
from rsdrill.sandbox.cluster import EmulatorEngine, Sandbox, up
from rsdrill.sandbox.config import build_topology
from tests.harness.cli import rsdrill_run

ROOT = Path(__file__).resolve().parents[2]
DATACENTER = "DC0"
# Where each member's VM runs: the secondary's, then the two others'.
SECONDARY_HOST, OTHER_HOSTS = "DC0_C1_H0", ("DC0_C0_H0", "DC0_H0")
CLUSTER_OF = {"DC0_C1_H0": "DC0_C1", "DC0_C0_H0": "DC0_C0", "DC0_H0": "DC0_H0"}


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Vcsim]:
    log = tmp_path_factory.mktemp("vcsim-domains") / "vcsim.log"
    with vcsim(log, clusters=2, hosts=2, standalone=1) as server:
        yield server


@pytest.fixture(scope="module")
def si(sim: Vcsim) -> Iterator[Any]:
    with session_of(sim) as opened:
        yield opened


@dataclass
class Placed:
    sandbox: Sandbox
    vms: dict[str, Any]  # member → its VM
    on: dict[str, str]  # member → the ESXi host its VM runs on
    secondary: str
    bystander: Any  # a VM of no member, on the secondary's ESXi host
    binding: VmBinding


def wait_for(condition: Callable[[], bool], timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.fixture(scope="module")
def placed_set(
    tmp_path_factory: pytest.TempPathFactory, sim: Vcsim, si: Any,
    free_port_base: Callable[[int], int],
) -> Iterator[Placed]:  # fmt: skip
    spec = build_topology("rs3", port_base=free_port_base(3), zones=["east", "east", "west"])
    sandbox = up(tmp_path_factory.mktemp("domains") / "set", spec, EmulatorEngine())
    try:
        assert wait_for(lambda: [s.state for s in sandbox.status()].count("SECONDARY") == 2)
        secondary = next(s.name for s in sandbox.status() if s.state == "SECONDARY")
        others = [m.host for m in spec.members if m.host != secondary]
        on = {secondary: SECONDARY_HOST, **dict(zip(others, OTHER_HOSTS, strict=True))}
        hosts = {h.name: h for h in esxi_hosts(si)}
        vms = {m: create_vm(si, f"zoned-{m.rsplit(':', 1)[1]}", hosts[on[m]]) for m in on}
        bystander = create_vm(si, "bystander", hosts[SECONDARY_HOST])
        with VmBinding(sim, sandbox, {vm._moId: m for m, vm in vms.items()}) as binding:
            yield Placed(sandbox, vms, on, secondary, bystander, binding)
    finally:
        sandbox.down(grace_s=2.0)


@pytest.fixture
def placed(placed_set: Placed) -> Placed:
    """The module's set, with the binding's record of kills and restarts started afresh."""
    placed_set.binding.events.clear()
    placed_set.binding.errors.clear()
    return placed_set


def experiment_doc(sim: Vcsim, placed: Placed, fault: dict[str, Any]) -> dict[str, Any]:
    names = {m: vm.name for m, vm in placed.vms.items()}
    vsphere = {"host": sim.host, "port": sim.port, "user": sim.user, "insecure": True,
               "task_timeout": "20s", "vms": {"by": "map", "map": names}}  # fmt: skip
    return {
        "name": "vsphere-domains",
        "target": {"platform": "vsphere", "topology": "rs3", "uri": placed.sandbox.uri,
                   "vsphere": vsphere},
        "probes": {"availability": {"interval": "50ms"}, "durability": None, "lag": None},
        "faults": [fault],
        "observe": {"after_revert": "5s"},
    }  # fmt: skip


def run(tmp_path: Path, doc: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """`rsdrill run` on `doc` as a user runs it; the password from the environment only."""
    experiment = tmp_path / "exp.yaml"
    experiment.write_text(yaml.safe_dump(doc, sort_keys=False))
    return rsdrill_run(
        ["run", str(experiment), "--out",
         str(tmp_path / "out"), "--no-live", "--no-history", "--yes"],
        capture_output=True, text=True, timeout=180, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "RSDRILL_HOME": str(tmp_path / "home")},
    )  # fmt: skip


def powered(placed: Placed) -> list[str]:
    return [vm.runtime.powerState for vm in [*placed.vms.values(), placed.bystander]]


def test_a_member_is_in_its_vm_s_cluster_and_datacenter_and_on_its_esxi_host(
    tmp_path: Path, sim: Vcsim, placed: Placed
) -> None:
    """Read once at setup, and only when a fault selects by domain; the members' own tags
    still select (their zone tag no longer places them)."""
    kill = {"at": "2s", "kind": "host-kill", "duration": "2s"}
    by_domain = Experiment.model_validate(
        experiment_doc(sim, placed, {**kill, "select": {"zone": "DC0_C1"}}))  # fmt: skip
    target = VsphereTarget(by_domain, tmp_path)
    try:
        target.setup()
        assert target.platform_placements() == {
            m: PlatformPlace(CLUSTER_OF[host], DATACENTER, (("esxi_host", host),))
            for m, host in placed.on.items()
        }
        states = current_states(target.members, options=target.connect_options)
        members = [m.host for m in placed.sandbox.spec.members]
        tagged_west = [m.host for m in placed.sandbox.spec.members if m.zone == "west"]
        on_host = {host: m for m, host in placed.on.items()}
        for select, wanted in [
            ({"zone": "DC0_C1"}, [placed.secondary]),
            ({"zone": "DC0_H0"}, [on_host["DC0_H0"]]),
            ({"region": DATACENTER}, members),
            ({"tag": {"esxi_host": "DC0_C0_H0"}}, [on_host["DC0_C0_H0"]]),
            ({"tag": {"zone": "west"}}, tagged_west),
        ]:
            domain = SelectDomain.model_validate(select)
            assert resolve(domain, states, None, placements_for(domain, target)) == wanted, select
    finally:
        target.teardown()
    by_role = Experiment.model_validate(experiment_doc(sim, placed, kill))
    target = VsphereTarget(by_role, tmp_path)
    try:
        target.setup()
        assert target.platform_placements() == {}
    finally:
        target.teardown()


@pytest.mark.slow
def test_a_zone_outage_powers_off_the_member_vms_of_that_cluster_and_on_again(
    tmp_path: Path, sim: Vcsim, placed: Placed
) -> None:
    fault = {"at": "2s", "kind": "zone-outage", "way": "kill", "select": {"zone": "DC0_C1"},
             "duration": "2s"}  # fmt: skip
    done = run(tmp_path, experiment_doc(sim, placed, fault))
    output = done.stdout + done.stderr
    assert done.returncode == 0, output + "\n".join(placed.binding.errors)
    (record,) = json.loads((tmp_path / "out" / "result.json").read_text())["faults"]
    assert (record["kind"], record["target"]) == ("zone-outage", placed.secondary)
    vm = placed.vms[placed.secondary]
    # Its VM alone: not the bystander on the same ESXi host, not the other clusters' members.
    assert record["detail"]["plan"] == f"hard power-off of VM {vm.name} ({vm._moId}); later " \
        "power on"  # fmt: skip
    assert [(e.member, e.what) for e in placed.binding.events] == [
        (placed.secondary, "SIGKILL (VM powered off)"),
        (placed.secondary, "restart (VM on, data disk attached)"),
        (placed.secondary, "answering")]  # fmt: skip
    assert powered(placed) == ["poweredOn"] * 4
    assert placed.binding.errors == []
    assert sim.password not in output


@pytest.mark.slow
def test_a_zone_nobody_is_in_is_refused_naming_the_zones_there_are(
    tmp_path: Path, sim: Vcsim, placed: Placed
) -> None:
    """east is what two members' tags say: the platform's place wins."""
    fault = {"at": "2s", "kind": "zone-outage", "way": "kill", "select": {"zone": "east"},
             "duration": "2s"}  # fmt: skip
    done = run(tmp_path, experiment_doc(sim, placed, fault))
    output = done.stdout + done.stderr
    assert done.returncode == 3, output
    zones = ", ".join(CLUSTER_OF[placed.on[m.host]] for m in placed.sandbox.spec.members)
    assert f"no member is in zone east (the members' zones: {zones})" in output
    assert placed.binding.events == []
    assert powered(placed) == ["poweredOn"] * 4


@pytest.mark.parametrize("way", ["isolate", None])
def test_a_zone_cut_off_is_refused_when_the_file_is_read(
    tmp_path: Path, sim: Vcsim, placed: Placed, way: str | None
) -> None:
    """Disconnecting the zone's NICs would cut its members off from each other too: not an
    isolation. isolate is the default way."""
    fault = {"at": "2s", "kind": "zone-outage", "select": {"zone": "DC0_C1"}, "duration": "2s"}
    done = run(tmp_path, experiment_doc(sim, placed, {**fault, **({"way": way} if way else {})}))
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"{tmp_path / 'exp.yaml'}:")
    assert line.endswith(": faults[0].way: zone-outage on vsphere takes way: kill (the "
                         "zone's VMs powered off); cutting a zone off is not there: "
                         "disconnecting its VMs' network adapters would cut them off from each "
                         "other too")  # fmt: skip
    assert not (tmp_path / "out").exists()
    assert placed.binding.events == []
