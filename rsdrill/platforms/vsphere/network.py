"""network-partition on vSphere: disconnect the member VM's network adapters (as pulling the
cable would: the guest keeps running, nobody reaches it, it reaches nobody), and connect them
again on revert."""

from __future__ import annotations

from typing import Any

from rsdrill.platforms.vsphere.client import Vsphere
from rsdrill.platforms.vsphere.lookup import NicRef, VmRef, nics, vm_object


def _set_connected(client: Vsphere, ref: VmRef, keys: list[int], connected: bool) -> list[str]:
    """Connect or disconnect the VM's adapters with these keys; the labels of those changed."""
    from pyVmomi import vim

    vm = vm_object(client, ref)
    changes, labels = [], []
    for nic in nics(client, vm, str(ref)):
        if nic.key not in keys or bool(nic.connectable.connected) == connected:
            continue
        nic.connectable.connected = connected
        changes.append(vim.vm.device.VirtualDeviceSpec(
            operation=vim.vm.device.VirtualDeviceSpec.Operation.edit, device=nic))  # fmt: skip
        labels.append(nic.deviceInfo.label)
    if changes:
        verb = "connect" if connected else "disconnect"
        client.run_task(f"{verb} {', '.join(labels)} of {ref}", vm.ReconfigVM_Task,
                        vim.vm.ConfigSpec(deviceChange=changes))  # fmt: skip
    return labels


def connect_nics(client: Vsphere, action: dict[str, Any]) -> str:
    """Connect the action's adapters again; nothing for those already connected."""
    ref = VmRef.from_action(action["vm"])
    labels = _set_connected(client, ref, [n["key"] for n in action["nics"]], True)
    if not labels:
        return f"{ref.name}: network adapters already connected"
    return f"{ref.name}: {', '.join(labels)} connected again"


class NicDisconnect:
    kind = "network-partition"

    def __init__(self, client: Vsphere, member: str, ref: VmRef, chosen: list[NicRef]) -> None:
        self.client = client
        self.target = member
        self.ref = ref
        self.nics = chosen

    def describe(self) -> str:
        labels = ", ".join(n.label for n in self.nics)
        return f"disconnect {labels} of {self.ref} (isolated from everyone); later reconnect"

    def _connect_action(self) -> dict[str, Any]:
        return {"action": "vsphere.connect-nics", **self.client.conn.to_action(),
                "vm": self.ref.to_action(), "nics": [n.to_action() for n in self.nics]}  # fmt: skip

    def revert_action(self) -> dict[str, Any] | None:
        return self._connect_action()

    def inject(self) -> None:
        _set_connected(self.client, self.ref, [n.key for n in self.nics], False)

    def verify(self, timeout_s: float) -> bool:
        keys = {n.key for n in self.nics}

        def cut() -> bool:
            found = nics(self.client, vm_object(self.client, self.ref), str(self.ref))
            return all(not n.connectable.connected for n in found if n.key in keys)

        return self.client.poll(cut, timeout_s)

    def revert(self) -> None:
        self.client.relogin_once(lambda: connect_nics(self.client, self._connect_action()))
