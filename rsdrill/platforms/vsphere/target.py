"""`platform: vsphere`: a replica set on vSphere VMs. Members come from the set itself (its
hello); each is mapped to its VM (guest hostname or IP, a name pattern, or an explicit map)
when the run starts, so a wrong password or a missing VM refuses the run before anything is
injected. Where a VM runs (its cluster, datacenter and ESXi host) is its member's failure domain.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rsdrill.domains import PlatformPlace
from rsdrill.errors import GuardRefusal
from rsdrill.experiment.schema import Experiment, SelectDomain
from rsdrill.platforms.base import PlacesMembers, RunTarget, TargetError
from rsdrill.platforms.remote import RemoteTarget
from rsdrill.platforms.vsphere.client import Vsphere, VsphereError, connection
from rsdrill.platforms.vsphere.lookup import find_member_vm, places
from rsdrill.platforms.vsphere.options import VspherePlatform


class VsphereTarget(RemoteTarget):
    def __init__(self, exp: Experiment, out_dir: Path) -> None:
        super().__init__(exp, out_dir)
        section = exp.target.section("vsphere", VspherePlatform)
        assert section is not None  # the schema requires the section
        self.vsphere = section
        self.faults = exp.faults
        self.guards = exp.guards
        self.client = Vsphere(connection(self.vsphere))
        # member → VM name, and where it runs when a fault selects by domain, as found at setup.
        self.vms: dict[str, str] = {}
        self.places: dict[str, PlatformPlace] = {}

    def setup(self) -> None:
        """Find the members, log in to vCenter, find each member's VM, and refuse host
        failures that would take a majority of the members down together."""
        super().setup()
        mapped = self.mapped_hosts
        if self.vsphere.vms.by == "map":
            # Members left out of the map (an arbiter elsewhere, say) cannot be faulted.
            mapped = [m for m in mapped if m in self.vsphere.vms.map]
        try:
            found = {m: find_member_vm(self.client, self.vsphere.vms, m) for m in mapped}
            with self.client.errors("read the members' VMs and their ESXi hosts"):
                self.vms = {m: vm.name for m, vm in found.items()}
                hosts = {m: vm.runtime.host for m, vm in found.items()}
                esxi = {m: host.name if host else "none" for m, host in hosts.items()}
            if any(isinstance(f.select, SelectDomain) for f in self.faults):
                # Only then: a few more calls per ESXi host (its cluster, its datacenter).
                self.places = places(self.client, hosts)
        except VsphereError as exc:
            raise TargetError(f"vsphere: {exc}") from None
        self._check_host_failures(esxi)

    def platform_placements(self) -> dict[str, PlatformPlace]:
        """Each member's VM's cluster (its zone), datacenter (its region) and ESXi host (tag
        esxi_host), as found at setup: only when a fault selects by domain."""
        return self.places

    def _check_host_failures(self, esxi: dict[str, str]) -> None:
        """The quorum guard counts one member per fault; a host failure (scope: host) takes
        down every member on that ESXi host."""
        host_failures = [f for f in self.faults if f.kind == "host-kill" and f.scope == "host"]
        if not host_failures or self.guards.allow_quorum_loss:
            return
        for name, hosts in self.replica_sets().items():  # each set keeps its own majority
            if len(hosts) < 2:
                continue
            together: dict[str, list[str]] = {}
            for member in hosts:
                if member in esxi:
                    together.setdefault(esxi[member], []).append(member)
            majority = len(hosts) // 2 + 1
            for host, members in sorted(together.items()):
                if len(members) >= majority:
                    of = f"{name}'s" if name else "the"
                    raise GuardRefusal("quorum", f"members {', '.join(sorted(members))} run on "
                                       f"one ESXi host ({host}): a host failure (scope: host) "
                                       f"takes {len(members)} of {of} {len(hosts)} members "
                                       "down together, a majority. Keep them on separate "
                                       "hosts (a DRS anti-affinity rule), or set `guards: "
                                       "{allow_quorum_loss: true}` to run it anyway")  # fmt: skip

    def teardown(self) -> None:
        self.client.close()


def make_target(exp: Experiment, out_dir: Path) -> VsphereTarget:
    return VsphereTarget(exp, out_dir)


if TYPE_CHECKING:
    # The runner takes it as a RunTarget that places its members: mypy checks here that it is.
    _RUN_TARGET: type[RunTarget] = VsphereTarget
    _PLACES: type[PlacesMembers] = VsphereTarget
