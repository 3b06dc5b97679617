"""Which VM is a member's host, which ESXi host, cluster and datacenter it runs in, and which
of its disks and network adapters a fault means."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rsdrill.domains import PlatformPlace
from rsdrill.platforms.vsphere.client import Vsphere, VsphereError
from rsdrill.platforms.vsphere.options import MemberVms

# Read in one round trip for every VM when a member is looked up.
_VM_PROPERTIES = ["name", "config.instanceUuid", "guest.hostName", "guest.ipAddress",
                  "guest.net", "runtime.host"]  # fmt: skip


@dataclass(frozen=True)
class VmRef:
    """A VM as the journal records it: its managed-object id and instance UUID (either finds
    it again; the name is for people)."""

    moref: str
    uuid: str
    name: str

    def to_action(self) -> dict[str, str]:
        return {"moref": self.moref, "uuid": self.uuid, "name": self.name}

    @classmethod
    def from_action(cls, data: dict[str, Any]) -> VmRef:
        return cls(moref=data["moref"], uuid=data["uuid"], name=data["name"])

    @classmethod
    def of(cls, vm: Any, name: str | None = None, uuid: str | None = None) -> VmRef:
        return cls(moref=vm._moId, uuid=uuid or vm.config.instanceUuid, name=name or vm.name)

    def __str__(self) -> str:
        return f"VM {self.name} ({self.moref})"


def vm_object(client: Vsphere, ref: VmRef) -> Any:
    """The live VM of a reference: by managed-object id, else by instance UUID (a VM removed
    from the inventory and registered again keeps its UUID, not its id)."""
    from pyVmomi import vim, vmodl

    vm = vim.VirtualMachine(ref.moref, client.stub)
    try:
        config = vm.config  # None when vCenter cannot read the VM's configuration
        if config is not None and config.instanceUuid == ref.uuid:
            return vm
    except vmodl.fault.ManagedObjectNotFound:
        pass
    except vmodl.MethodFault as fault:
        raise client.explain(fault, f"look up {ref}") from None
    found = client.call(f"find {ref} by UUID", client.content.searchIndex.FindByUuid,
                        None, ref.uuid, True, True)  # fmt: skip
    if found is None:
        raise VsphereError(f"ManagedObjectNotFound: {ref} (uuid {ref.uuid}) no longer exists "
                           f"on {client.conn.address}", "ManagedObjectNotFound")  # fmt: skip
    return found


def _is_guest(host: str, props: dict[str, Any]) -> bool:
    """Whether the guest reports `host` as one of its IP addresses, or as its hostname (the
    same name, or one of them the other's first DNS label: db1 and db1.example.com)."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        guest = (props.get("guest.hostName") or "").lower()
        return bool(guest) and (host == guest or host == guest.split(".")[0]
                                or host.split(".")[0] == guest)  # fmt: skip
    addresses = {props.get("guest.ipAddress")}
    for nic in props.get("guest.net") or []:
        addresses |= set(nic.ipAddress or [])
    return host in {a.lower() for a in addresses if a}


def find_member_vm(client: Vsphere, mapping: MemberVms, member: str) -> Any:
    """The one VM that is `member`'s host; VsphereError naming the member otherwise."""
    from pyVmomi import vim

    host, port = member.rsplit(":", 1)
    host = host.lower()
    vms = client.collect(vim.VirtualMachine, _VM_PROPERTIES)
    if mapping.by == "map":
        if member not in mapping.map:
            raise VsphereError(f"NotMapped: member {member} is not in target.vsphere.vms.map "
                               f"({', '.join(mapping.map) or 'empty'})", "NotMapped")  # fmt: skip
        wanted = mapping.map[member]
        how = f"named {wanted}"
        found = [vm for vm, props in vms if props.get("name") == wanted]
    elif mapping.by == "name":
        assert mapping.name is not None  # the schema requires it
        wanted = mapping.name.format(host=host, short=host.split(".")[0], port=port)
        how = f"named {wanted} (vms.name {mapping.name})"
        found = [vm for vm, props in vms if props.get("name") == wanted]
    else:
        how = f"whose guest hostname or IP address is {host}"
        found = [vm for vm, props in vms if _is_guest(host, props)]
    where = f" in datacenter {client.conn.datacenter}" if client.conn.datacenter else ""
    if not found:
        hint = (" (VMware Tools report them: is it running in the guest? Or map members with "
                "vms.by: name or map)") if mapping.by == "guest" else ""  # fmt: skip
        raise VsphereError(f"NotFound: member {member}: no VM {how}{where} on "
                           f"{client.conn.address}{hint}", "NotFound")  # fmt: skip
    if len(found) > 1:
        names = ", ".join(sorted(f"{vm.name} ({vm._moId})" for vm in found))
        raise VsphereError(f"Ambiguous: member {member}: several VMs {how}{where}: {names} "
                           "(narrow with `datacenter` or map members with vms.by: map)",
                           "Ambiguous")  # fmt: skip
    return found[0]


# -- ESXi hosts ----------------------------------------------------------------------------


def host_name(client: Vsphere, host: Any) -> str:
    return str(client.call("read the ESXi host's name", lambda: host.name))


ESXI_HOST_TAG = "esxi_host"
"""The tag a member's ESXi host is selectable by: `select: {tag: {esxi_host: NAME}}`."""


def places(client: Vsphere, hosts: Mapping[str, Any]) -> dict[str, PlatformPlace]:
    """Where each member's VM runs (`hosts`: member → its ESXi host, None for none): the
    host's compute cluster as its zone (a standalone host's own compute resource is its
    cluster), the datacenter holding it as its region, the host as tag esxi_host. Each ESXi
    host is read once."""
    from pyVmomi import vim

    def place(host: Any) -> PlatformPlace:
        cluster = host.parent
        datacenter = cluster.parent
        while not isinstance(datacenter, vim.Datacenter):  # up through the host folders
            datacenter = datacenter.parent
        return PlatformPlace(cluster.name, datacenter.name, ((ESXI_HOST_TAG, host.name),))

    found: dict[str, PlatformPlace] = {}
    with client.errors("read the clusters and datacenters of the members' ESXi hosts"):
        for host in hosts.values():
            if host is not None and host._moId not in found:
                found[host._moId] = place(host)
    return {member: found[host._moId] for member, host in hosts.items() if host is not None}


def restart_hosts(client: Vsphere, failed: Any, count: int, restart_on: str) -> list[Any | None]:
    """Where each of `count` VMs of ESXi host `failed` is powered on again: None (where it
    was), or hosts of the same cluster that can run VMs, in turn (as HA spreads them)."""
    from pyVmomi import vim

    if restart_on == "same":
        return [None] * count
    if restart_on != "other":
        named = [h for h, props in client.collect(vim.HostSystem, ["name"])
                 if props["name"] == restart_on]  # fmt: skip
        if not named:
            raise VsphereError(f"NotFound: restart_on: no ESXi host named {restart_on} on "
                               f"{client.conn.address}", "NotFound")  # fmt: skip
        return [named[0]] * count

    def usable(host: Any) -> bool:
        runtime = host.runtime
        return bool(
            host != failed
            and runtime.connectionState == "connected"
            and not runtime.inMaintenanceMode
            and runtime.powerState == "poweredOn"
        )

    with client.errors("find the other hosts of the cluster"):
        cluster = failed.parent
        others = sorted((h for h in cluster.host if usable(h)), key=lambda h: h.name)
        cluster_name = cluster.name
    if not others:
        raise VsphereError(f"NoHost: restart_on: other: {cluster_name} has no other connected "
                           "host outside maintenance mode to restart the VMs on",
                           "NoHost")  # fmt: skip
    return [others[i % len(others)] for i in range(count)]


# -- devices -------------------------------------------------------------------------------


@dataclass(frozen=True)
class DiskRef:
    """A virtual disk as the journal records it: its backing file finds it again (its key
    changes when it is removed and added back)."""

    file: str
    label: str
    controller_key: int
    unit_number: int
    disk_mode: str
    thin: bool | None
    # storageIOAllocation.limit: -1 unlimited; None when the disk has no allocation at all.
    iops_limit: int | None

    def to_action(self) -> dict[str, Any]:
        return {"file": self.file, "label": self.label, "controller_key": self.controller_key,
                "unit_number": self.unit_number, "disk_mode": self.disk_mode,
                "thin": self.thin, "iops_limit": self.iops_limit}  # fmt: skip

    @classmethod
    def from_action(cls, data: dict[str, Any]) -> DiskRef:
        return cls(**data)


def devices(client: Vsphere, vm: Any, what: str) -> list[Any]:
    with client.errors(f"read the devices of {what}"):
        return list(vm.config.hardware.device)


def disks(client: Vsphere, vm: Any, what: str) -> list[Any]:
    from pyVmomi import vim

    return [d for d in devices(client, vm, what) if isinstance(d, vim.vm.device.VirtualDisk)]


def disk_by_file(client: Vsphere, vm: Any, what: str, file: str) -> Any | None:
    return next((d for d in disks(client, vm, what) if d.backing.fileName == file), None)


def _label(device: Any) -> str:
    return str(device.deviceInfo.label) if device.deviceInfo else f"device {device.key}"


def select_disk(client: Vsphere, vm: Any, ref: VmRef, choice: str | int | None) -> DiskRef:
    """The data disk `choice` means (a label, a unit number, or None for the only disk)."""
    from pyVmomi import vim

    found = disks(client, vm, str(ref))
    listing = ", ".join(f"{_label(d)} (unit {d.unitNumber})" for d in found) or "none"
    if choice is None:
        chosen = found if len(found) == 1 else []
        problem = "" if found else "has no virtual disk"
        if len(found) > 1:
            problem = (f"has {len(found)} disks ({listing}): say which holds the data with "
                       "faults[].vsphere.disk (a label or a unit number)")  # fmt: skip
    else:
        if isinstance(choice, int):
            chosen = [d for d in found if d.unitNumber == choice]
        else:
            chosen = [d for d in found if _label(d).lower() == choice.lower()]
        problem = f"has no disk {choice!r} (disks: {listing})"
        if len(chosen) > 1:
            problem = f"has several disks at unit {choice} ({listing}): give the label instead"
    if len(chosen) != 1:
        raise VsphereError(f"NoDisk: {ref} {problem}", "NoDisk")
    disk = chosen[0]
    if not isinstance(disk.backing, vim.vm.device.VirtualDisk.FlatVer2BackingInfo):
        raise VsphereError(f"Unsupported: {ref} {_label(disk)} is backed by "
                           f"{type(disk.backing).__name__.rsplit('.', 1)[-1]}: rsdrill handles "
                           "flat VMDK disks (VMFS, NFS, vSAN datastores)",
                           "Unsupported")  # fmt: skip
    allocation = disk.storageIOAllocation
    return DiskRef(
        file=disk.backing.fileName,
        label=_label(disk),
        controller_key=disk.controllerKey,
        unit_number=disk.unitNumber,
        disk_mode=disk.backing.diskMode,
        thin=disk.backing.thinProvisioned,
        iops_limit=None if allocation is None or allocation.limit is None else allocation.limit,
    )


@dataclass(frozen=True)
class NicRef:
    key: int
    label: str

    def to_action(self) -> dict[str, Any]:
        return {"key": self.key, "label": self.label}


def nics(client: Vsphere, vm: Any, what: str) -> list[Any]:
    from pyVmomi import vim

    return [d for d in devices(client, vm, what)
            if isinstance(d, vim.vm.device.VirtualEthernetCard)]  # fmt: skip


def select_nics(client: Vsphere, vm: Any, ref: VmRef, choice: str | None) -> list[NicRef]:
    """The adapters `choice` means (a label), or every connected one."""
    found = nics(client, vm, str(ref))
    listing = ", ".join(_label(n) for n in found) or "none"
    if choice is None:
        chosen = [n for n in found if n.connectable is not None and n.connectable.connected]
        problem = f"has no connected network adapter (adapters: {listing})"
    else:
        chosen = [n for n in found if _label(n).lower() == choice.lower()]
        problem = f"has no network adapter {choice!r} (adapters: {listing})"
    if not chosen:
        raise VsphereError(f"NoNic: {ref} {problem}", "NoNic")
    return [NicRef(n.key, _label(n)) for n in chosen]
