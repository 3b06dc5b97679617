"""Disk faults: volume-detach (remove the data disk from the VM, keeping its file, and add the
same file back on revert) and iops-throttle (the disk's storageIOAllocation.limit, restored to
exactly what it was, unlimited (-1) included)."""

from __future__ import annotations

from typing import Any

from rsdrill.platforms.vsphere.client import Vsphere
from rsdrill.platforms.vsphere.lookup import DiskRef, VmRef, disk_by_file, vm_object

UNLIMITED = -1


def _reconfigure(client: Vsphere, what: str, vm: Any, *changes: Any) -> None:
    from pyVmomi import vim

    client.run_task(what, vm.ReconfigVM_Task, vim.vm.ConfigSpec(deviceChange=list(changes)))


def _edit(device: Any) -> Any:
    from pyVmomi import vim

    return vim.vm.device.VirtualDeviceSpec(
        operation=vim.vm.device.VirtualDeviceSpec.Operation.edit, device=device
    )


def attach_disk(client: Vsphere, action: dict[str, Any]) -> str:
    """Add the action's disk file back to its VM where it was (controller and unit), with its
    I/O limit; nothing when the VM already has that file attached."""
    from pyVmomi import vim

    ref = VmRef.from_action(action["vm"])
    disk = DiskRef.from_action(action["disk"])
    vm = vm_object(client, ref)
    if disk_by_file(client, vm, str(ref), disk.file) is not None:
        return f"{ref.name}: {disk.file} already attached"
    backing = vim.vm.device.VirtualDisk.FlatVer2BackingInfo(
        fileName=disk.file, diskMode=disk.disk_mode, thinProvisioned=disk.thin
    )
    device = vim.vm.device.VirtualDisk(
        key=-1, controllerKey=disk.controller_key, unitNumber=disk.unit_number, backing=backing
    )
    if disk.iops_limit is not None:
        device.storageIOAllocation = vim.StorageResourceManager.IOAllocationInfo(
            limit=disk.iops_limit
        )
    # No fileOperation: the existing file is attached, not created.
    add = vim.vm.device.VirtualDeviceSpec(
        operation=vim.vm.device.VirtualDeviceSpec.Operation.add, device=device
    )
    _reconfigure(client, f"add {disk.file} back to {ref}", vm, add)
    return f"{ref.name}: {disk.file} attached again ({disk.label})"


def set_iops_limit(client: Vsphere, action: dict[str, Any]) -> str:
    """Set the disk's storageIOAllocation.limit to the action's `limit` (-1: unlimited);
    nothing when it already is."""
    from pyVmomi import vim

    ref = VmRef.from_action(action["vm"])
    file, limit = action["disk"]["file"], int(action["limit"])
    vm = vm_object(client, ref)
    device = disk_by_file(client, vm, str(ref), file)
    if device is None:
        return f"{ref.name}: {file} is not attached: no limit to set"
    allocation = device.storageIOAllocation
    current = UNLIMITED if allocation is None or allocation.limit is None else allocation.limit
    shown = "unlimited" if limit == UNLIMITED else f"{limit} IOPS"
    if current == limit:
        return f"{ref.name}: {file} already at {shown}"
    if allocation is None:
        device.storageIOAllocation = vim.StorageResourceManager.IOAllocationInfo()
    device.storageIOAllocation.limit = limit
    _reconfigure(client, f"set the I/O limit of {file} on {ref} to {shown}", vm, _edit(device))
    return f"{ref.name}: {file} set to {shown}"


class DiskDetach:
    """Remove the member's data disk from its VM (the file stays on the datastore): the
    guest sees its volume vanish; the same file is added back on revert."""

    kind = "volume-detach"

    def __init__(self, client: Vsphere, member: str, ref: VmRef, disk: DiskRef) -> None:
        self.client = client
        self.target = member
        self.ref = ref
        self.disk = disk

    def describe(self) -> str:
        return (f"remove {self.disk.label} ({self.disk.file}) from {self.ref}, keeping its file; "
                "later add it back")  # fmt: skip

    def _attach_action(self) -> dict[str, Any]:
        return {"action": "vsphere.attach-disk", **self.client.conn.to_action(),
                "vm": self.ref.to_action(), "disk": self.disk.to_action()}  # fmt: skip

    def revert_action(self) -> dict[str, Any] | None:
        return self._attach_action()

    def inject(self) -> None:
        from pyVmomi import vim

        vm = vm_object(self.client, self.ref)
        device = disk_by_file(self.client, vm, str(self.ref), self.disk.file)
        if device is None:
            return  # already gone: nothing to remove, and the revert adds it (back)
        remove = vim.vm.device.VirtualDeviceSpec(
            operation=vim.vm.device.VirtualDeviceSpec.Operation.remove, device=device
        )
        _reconfigure(self.client, f"remove {self.disk.label} from {self.ref}", vm, remove)

    def verify(self, timeout_s: float) -> bool:
        return self.client.poll(lambda: disk_by_file(
            self.client, vm_object(self.client, self.ref), str(self.ref), self.disk.file
        ) is None, timeout_s)  # fmt: skip

    def revert(self) -> None:
        self.client.relogin_once(lambda: attach_disk(self.client, self._attach_action()))


class IopsLimit:
    """Cap the data disk's I/O operations per second (reads and writes together) through its
    storageIOAllocation.limit; the original limit comes back on revert."""

    kind = "iops-throttle"

    def __init__(self, client: Vsphere, member: str, ref: VmRef, disk: DiskRef,
                 iops: int) -> None:  # fmt: skip
        self.client = client
        self.target = member
        self.ref = ref
        self.disk = disk
        self.iops = iops
        # Read before the fault: a disk without an allocation is unlimited.
        self.original = UNLIMITED if disk.iops_limit is None else disk.iops_limit

    def describe(self) -> str:
        was = "unlimited" if self.original == UNLIMITED else f"{self.original} IOPS"
        return (f"limit {self.disk.label} ({self.disk.file}) of {self.ref} to {self.iops} IOPS; "
                f"later restore its limit ({was})")  # fmt: skip

    def _action(self, limit: int) -> dict[str, Any]:
        return {"action": "vsphere.set-iops-limit", **self.client.conn.to_action(),
                "vm": self.ref.to_action(), "disk": self.disk.to_action(),
                "limit": limit}  # fmt: skip

    def revert_action(self) -> dict[str, Any] | None:
        return self._action(self.original)

    def inject(self) -> None:
        set_iops_limit(self.client, self._action(self.iops))

    def verify(self, timeout_s: float) -> bool:
        def limited() -> bool:
            vm = vm_object(self.client, self.ref)
            device = disk_by_file(self.client, vm, str(self.ref), self.disk.file)
            allocation = device.storageIOAllocation if device is not None else None
            return allocation is not None and allocation.limit == self.iops

        return self.client.poll(limited, timeout_s)

    def revert(self) -> None:
        self.client.relogin_once(lambda: set_iops_limit(self.client, self._action(self.original)))
