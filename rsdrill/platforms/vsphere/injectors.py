"""Faults on VMware vSphere VMs and ESXi hosts (`platform: vsphere`), through pyVmomi —
imported lazily, and only in this package.

`vsphere_injector()` builds the injector for one fault on one member; `REVERT_ACTIONS` carry
out journaled revert actions from the journal alone (for `rsdrill recover`). Actions carry only
non-secret settings (vCenter host, port, user, the NAME of the password's environment variable,
TLS settings) and the VMs' managed-object ids and instance UUIDs; the password is read from the
environment when an action is carried out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rsdrill.experiment.kinds import ha_restart
from rsdrill.platforms.base import TargetError
from rsdrill.platforms.vsphere.client import Connection, Vsphere, VsphereError
from rsdrill.platforms.vsphere.disk import DiskDetach, IopsLimit, attach_disk, set_iops_limit
from rsdrill.platforms.vsphere.lookup import (
    VmRef,
    find_member_vm,
    host_name,
    restart_hosts,
    select_disk,
    select_nics,
)
from rsdrill.platforms.vsphere.network import NicDisconnect, connect_nics
from rsdrill.platforms.vsphere.options import VsphereFault
from rsdrill.platforms.vsphere.power import PowerOff, Suspend, power_on, vms_on_host

if TYPE_CHECKING:
    from rsdrill.experiment.schema import Fault
    from rsdrill.platforms.base import Injector
    from rsdrill.platforms.vsphere.options import VspherePlatform

__all__ = ["REVERT_ACTIONS", "Connection", "Vsphere", "VsphereError", "connection",
           "vsphere_injector"]  # fmt: skip


def connection(platform: VspherePlatform) -> Connection:
    return Connection(
        host=platform.host,
        user=platform.user,
        port=platform.port,
        password_env=platform.password_env,
        insecure=platform.insecure,
        ca_file=platform.ca_file,
        datacenter=platform.datacenter,
        task_timeout=platform.task_timeout,
    )


def vsphere_injector(client: Vsphere, platform: VspherePlatform, fault: Fault,
                     member: str) -> Injector:  # fmt: skip
    """The injector for `fault` on `member`, whose VM is looked up now (it may have moved)."""
    options = fault.vsphere or VsphereFault()
    vm = find_member_vm(client, platform.vms, member)
    ref = client.call(f"read VM {member}", VmRef.of, vm)
    if fault.kind == "host-kill":
        esxi, on_host = vms_on_host(client, vm)
        vms = on_host if fault.scope == "host" else [vm]
        failed = host_name(client, esxi) if fault.scope == "host" else None
        refs = [ref, *(client.call("read a VM", VmRef.of, v) for v in vms[1:])]
        hosts = restart_hosts(client, esxi, len(refs), options.restart_on)
        return PowerOff(client, member, refs, hosts, restart=fault.restart is not False,
                        failed_host=failed, ha=ha_restart(fault))  # fmt: skip
    if fault.kind == "host-freeze":
        return Suspend(client, member, ref)
    if fault.kind == "volume-detach":
        return DiskDetach(client, member, ref, select_disk(client, vm, ref, options.disk))
    if fault.kind == "iops-throttle":
        assert fault.iops is not None  # check_experiment allows no other limit
        return IopsLimit(client, member, ref, select_disk(client, vm, ref, options.disk),
                         fault.iops)  # fmt: skip
    if fault.kind == "network-partition":
        return NicDisconnect(client, member, ref, select_nics(client, vm, ref, options.nic))
    raise VsphereError(f"Unsupported: {fault.kind} is not available on vsphere", "Unsupported")


def _revert(handler: Callable[[Vsphere, dict[str, Any]], str]) -> Callable[[dict[str, Any]], str]:
    def carry_out(action: dict[str, Any]) -> str:
        client = Vsphere(Connection.from_action(action))
        try:
            return handler(client, action)
        except (VsphereError, KeyError, TypeError) as exc:
            raise TargetError(f"{action.get('action')}: {exc}") from None
        finally:
            client.close()

    return carry_out


REVERT_ACTIONS: dict[str, Callable[[dict[str, Any]], str]] = {
    "vsphere.power-on": _revert(power_on),
    "vsphere.attach-disk": _revert(attach_disk),
    "vsphere.set-iops-limit": _revert(set_iops_limit),
    "vsphere.connect-nics": _revert(connect_nics),
}
