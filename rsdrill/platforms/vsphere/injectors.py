"""Faults on VMware vSphere VMs and ESXi hosts (`platform: vsphere`), through pyVmomi —
imported lazily, and only in this package.

One factory per fault kind (`host_kill`, `host_freeze`, `volume_detach`, `iops_throttle`,
`network_partition`, `zone_outage`: the platform's `injectors` table) builds the injector for
one fault on one member's VM; `REVERT_ACTIONS` carry out journaled revert actions from the
journal alone (for `rsdrill recover`). Actions carry only non-secret settings (vCenter host,
port, user, the NAME of the password's environment variable, TLS settings) and the VMs'
managed-object ids and instance UUIDs; the password is read from the environment when an
action is carried out.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rsdrill.platforms.base import TargetError
from rsdrill.platforms.vsphere.client import Connection, Vsphere, VsphereError, connection
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
    from rsdrill.faults import (
        HostFreezeFault,
        HostKillFault,
        IopsThrottleFault,
        NetworkPartitionFault,
        VolumeDetachFault,
        ZoneOutageFault,
    )
    from rsdrill.platforms.base import Injector, InjectorFactory, KindFault
    from rsdrill.platforms.vsphere.target import VsphereTarget

__all__ = ["REVERT_ACTIONS", "Connection", "Vsphere", "VsphereError", "connection"]


@dataclass(frozen=True)
class OnVm:
    """Where a vSphere fault lands: the member's VM, as found when the fault is due."""

    client: Vsphere
    member: str
    vm: Any
    ref: VmRef
    options: VsphereFault


def on_member_vm(build: Callable[[OnVm, KindFault], Injector]) -> InjectorFactory[KindFault]:
    """The factory `(target, fault, host)` that builds with `build` on the member's VM, looked
    up now: HA or DRS may have moved it since setup, and the session may have expired while the
    probes ran (then it logs in again, once)."""

    @functools.wraps(build)
    def factory(target: VsphereTarget, fault: KindFault, host: str) -> Injector:
        client = target.client

        def on_vm() -> Injector:
            vm = find_member_vm(client, target.vsphere.vms, host)
            ref = client.call(f"read VM {host}", VmRef.of, vm)
            return build(
                OnVm(
                    client, host, vm, ref, fault.section("vsphere", VsphereFault) or VsphereFault()
                ),
                fault,
            )

        return client.relogin_once(on_vm)

    return factory


@on_member_vm
def host_kill(on: OnVm, fault: HostKillFault) -> Injector:
    """Power off the VM, or every VM on its ESXi host (scope host)."""
    client = on.client
    esxi, on_host = vms_on_host(client, on.vm)
    vms = on_host if fault.scope == "host" else [on.vm]
    failed = host_name(client, esxi) if fault.scope == "host" else None
    refs = [on.ref, *(client.call("read a VM", VmRef.of, v) for v in vms[1:])]
    hosts = restart_hosts(client, esxi, len(refs), on.options.restart_on)
    return PowerOff(client, on.member, refs, hosts, restart=fault.restart is not False,
                    failed_host=failed, ha=fault.ha_restart)  # fmt: skip


@on_member_vm
def zone_outage(on: OnVm, fault: ZoneOutageFault) -> Injector:
    """Way kill: the VM, one of the zone's, powered off hard and on again on revert, where it
    was (the run injects every member of the zone before it verifies any)."""
    return PowerOff(on.client, on.member, [on.ref], [None], restart=True, failed_host=None)


@on_member_vm
def host_freeze(on: OnVm, fault: HostFreezeFault) -> Injector:
    """Suspend the VM."""
    return Suspend(on.client, on.member, on.ref)


@on_member_vm
def volume_detach(on: OnVm, fault: VolumeDetachFault) -> Injector:
    """Remove the data disk, its file kept."""
    return DiskDetach(on.client, on.member, on.ref,
                      select_disk(on.client, on.vm, on.ref, on.options.disk))  # fmt: skip


@on_member_vm
def iops_throttle(on: OnVm, fault: IopsThrottleFault) -> Injector:
    """The data disk's storageIOAllocation.limit."""
    assert fault.iops is not None  # check_experiment allows no other limit
    disk = select_disk(on.client, on.vm, on.ref, on.options.disk)
    return IopsLimit(on.client, on.member, on.ref, disk, fault.iops)


@on_member_vm
def network_partition(on: OnVm, fault: NetworkPartitionFault) -> Injector:
    """Disconnect the NICs."""
    return NicDisconnect(on.client, on.member, on.ref,
                         select_nics(on.client, on.vm, on.ref, on.options.nic))  # fmt: skip


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
