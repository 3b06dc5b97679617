"""Power faults: host-kill (a hard power-off of the member's VM, or of every VM of its ESXi host
for `scope: host`) and host-freeze (suspend). Both come back through `power_on`, which also
resumes a suspended VM and can place a VM on another host first, as vSphere HA would."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rsdrill.faults.host_kill import ha_detail
from rsdrill.platforms.vsphere.client import Vsphere, VsphereError
from rsdrill.platforms.vsphere.lookup import VmRef, host_name, vm_object

if TYPE_CHECKING:
    from rsdrill.faults.host_kill import Restart


def power_states(client: Vsphere, refs: list[VmRef]) -> list[str]:
    with client.errors("read power states"):
        return [str(vm_object(client, ref).runtime.powerState) for ref in refs]


def power_on(client: Vsphere, action: dict[str, Any]) -> str:
    """Power on (or resume) the action's VMs, each on its `host` when one is given (moved
    there first while it is off); VMs already on are left alone. One line saying what
    happened. A VM that cannot be brought back does not stop the others: the first failure
    is raised once every VM has been tried."""
    done: list[str] = []
    tasks: list[tuple[str, Any]] = []
    failures: list[VsphereError] = []
    for entry in action["vms"]:
        try:
            started = _start_power_on(client, entry)
        except VsphereError as exc:
            failures.append(exc)
            continue
        done.append(started[0])
        if started[1] is not None:
            tasks.append((str(VmRef.from_action(entry)), started[1]))
    try:
        client.run_tasks("power on", tasks)
    except VsphereError as exc:
        failures.insert(0, exc)
    if failures:
        more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
        raise VsphereError(f"{failures[0]}{more}", failures[0].code)
    return "; ".join(done)


def _start_power_on(client: Vsphere, entry: dict[str, Any]) -> tuple[str, Any | None]:
    """What happens to one VM, and its power-on task (None when it is on already)."""
    from pyVmomi import vim

    ref = VmRef.from_action(entry)
    vm = vm_object(client, ref)
    state = client.call(f"read the power state of {ref}", lambda: vm.runtime.powerState)
    if state == "poweredOn":
        return f"{ref.name} already on", None
    where = ""
    if entry.get("host") and state == "poweredOff":
        host = vim.HostSystem(entry["host"], client.stub)
        if client.call(f"read the host of {ref}", lambda: vm.runtime.host) != host:
            name = host_name(client, host)
            client.run_task(f"move {ref} to {name}", vm.RelocateVM_Task,
                            vim.vm.RelocateSpec(host=host))  # fmt: skip
            where = f" on {name}"
    verb = "resumed" if state == "suspended" else "powered on"
    return f"{ref.name} {verb}{where}", client.call(f"power on {ref}", vm.PowerOnVM_Task)


class _PowerFault:
    """The VMs a power fault acts on, and the journal record that brings them back."""

    def __init__(self, client: Vsphere, member: str, refs: list[VmRef],
                 hosts: list[Any | None]) -> None:  # fmt: skip
        self.client = client
        self.target = member
        self.refs = refs
        self.hosts = hosts

    def power_on_action(self) -> dict[str, Any]:
        vms = [{**ref.to_action(), "host": host._moId if host is not None else None}
               for ref, host in zip(self.refs, self.hosts, strict=True)]  # fmt: skip
        return {"action": "vsphere.power-on", **self.client.conn.to_action(), "vms": vms}

    def _all_in(self, state: str, timeout_s: float) -> bool:
        return self.client.poll(
            lambda: all(s == state for s in power_states(self.client, self.refs)), timeout_s
        )

    def _names(self) -> str:
        return ", ".join(str(ref) for ref in self.refs)


class PowerOff(_PowerFault):
    """A hard power-off (no guest shutdown: a host lost without warning) of the member's VM,
    or of every powered-on VM of its ESXi host (a host failure)."""

    kind = "host-kill"

    def __init__(self, client: Vsphere, member: str, refs: list[VmRef], hosts: list[Any | None],
                 *, restart: bool, failed_host: str | None,
                 ha: Restart | None = None) -> None:  # fmt: skip
        super().__init__(client, member, refs, hosts)
        self.restart = restart
        self.failed_host = failed_host
        # The HA model: powered on `detect` after the failure; the guests boot by themselves.
        self.ha = ha

    def describe(self) -> str:
        what = f"hard power-off of {self._names()}"
        if self.failed_host:
            what += f" (every VM powered on on ESXi host {self.failed_host}: a host failure)"
        if not self.restart:
            return what + "; they stay off"
        places = {host_name(self.client, h) for h in self.hosts if h is not None}
        when = f" {self.ha.detect:g}s later, as HA would," if self.ha is not None else " later"
        return what + f";{when} power on" + (f" on {', '.join(sorted(places))}" if places else "")

    def revert_action(self) -> dict[str, Any] | None:
        return self.power_on_action() if self.restart else None

    def inject(self) -> None:
        # Started together and then waited for: a host failure takes its VMs down at once.
        tasks = []
        for ref in self.refs:
            vm = vm_object(self.client, ref)
            tasks.append((str(ref), self.client.call(f"power off {ref}", vm.PowerOffVM_Task)))
        self.client.run_tasks("power off", tasks)

    def verify(self, timeout_s: float) -> bool:
        return self._all_in("poweredOff", timeout_s)

    def revert(self) -> None:
        self.client.relogin_once(lambda: power_on(self.client, self.power_on_action()))

    def report(self) -> dict[str, Any]:
        """For the result: the HA model's figures (the analysis adds the measured phases)."""
        return {} if self.ha is None else {"ha": ha_detail(self.ha, boot_waited=False)}


class Suspend(_PowerFault):
    """Suspend the member's VM: it keeps its state and answers nothing until resumed."""

    kind = "host-freeze"

    def __init__(self, client: Vsphere, member: str, ref: VmRef) -> None:
        super().__init__(client, member, [ref], [None])

    def describe(self) -> str:
        return f"suspend {self._names()}; later resume it (power on)"

    def revert_action(self) -> dict[str, Any] | None:
        return self.power_on_action()

    def inject(self) -> None:
        ref = self.refs[0]
        vm = vm_object(self.client, ref)
        self.client.run_task(f"suspend {ref}", vm.SuspendVM_Task)

    def verify(self, timeout_s: float) -> bool:
        return self._all_in("suspended", timeout_s)

    def revert(self) -> None:
        self.client.relogin_once(lambda: power_on(self.client, self.power_on_action()))


def vms_on_host(client: Vsphere, vm: Any) -> tuple[Any, list[Any]]:
    """The ESXi host running `vm`, and every powered-on VM on it (`vm` first)."""
    from pyVmomi import vmodl

    def powered_on(other: Any) -> bool:
        try:
            return bool(other.runtime.powerState == "poweredOn")
        except vmodl.fault.ManagedObjectNotFound:
            return False  # deleted since the host listed it

    with client.errors("list the VMs of the member's ESXi host"):
        host = vm.runtime.host
        if host is None:
            raise VsphereError(f"NoHost: VM {vm.name} runs on no ESXi host", "NoHost")
        others = [v for v in host.vm if v != vm and powered_on(v)]
        return host, [vm, *sorted(others, key=lambda v: v.name)]
