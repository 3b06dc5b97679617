"""`platform: vsphere`: a replica set on vSphere VMs. Members come from the set itself (its
hello); each is mapped to its VM (guest hostname or IP, a name pattern, or an explicit map)
when the run starts, so a wrong password or a missing VM refuses the run before anything is
injected.
"""

from __future__ import annotations

from pathlib import Path

from rsdrill.experiment.schema import Experiment, Fault
from rsdrill.injectors.base import Injector
from rsdrill.injectors.vsphere import Vsphere, VsphereError, connection, vsphere_injector
from rsdrill.targets import TargetError
from rsdrill.targets.remote import RemoteTarget


class VsphereTarget(RemoteTarget):
    def __init__(self, exp: Experiment, out_dir: Path) -> None:
        super().__init__(exp, out_dir)
        assert exp.target.vsphere is not None  # the schema requires the section
        self.vsphere = exp.target.vsphere
        self.client = Vsphere(connection(self.vsphere))
        # member → VM name, as found at setup (for the plan and error messages).
        self.vms: dict[str, str] = {}

    def setup(self) -> None:
        """Find the members, log in to vCenter, and find each member's VM."""
        from rsdrill.injectors.vsphere.lookup import find_member_vm

        super().setup()
        mapped = self.members
        if self.vsphere.vms.by == "map":
            # Members left out of the map (an arbiter elsewhere, say) cannot be faulted.
            mapped = [m for m in self.members if m in self.vsphere.vms.map]
        try:
            for member in mapped:
                vm = find_member_vm(self.client, self.vsphere.vms, member)
                self.vms[member] = self.client.call("read a VM's name", lambda vm=vm: vm.name)
        except VsphereError as exc:
            raise TargetError(f"vsphere: {exc}") from None

    def injector(self, fault: Fault, host: str) -> Injector:
        # Looked up again: HA or DRS may have moved the VM since setup (and the session may
        # have expired while the probes ran).
        return self.client.relogin_once(
            lambda: vsphere_injector(self.client, self.vsphere, fault, host)
        )

    def teardown(self) -> None:
        self.client.close()


def make_target(exp: Experiment, out_dir: Path) -> VsphereTarget:
    return VsphereTarget(exp, out_dir)
