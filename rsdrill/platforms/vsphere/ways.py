"""What the vsphere platform does for each kind it carries out (its column of the fault tables;
the privileges `rsdrill plan` lists are read from here)."""

from __future__ import annotations

from typing import Any

from rsdrill.faults.spec import Way, When
from rsdrill.platforms.vsphere.options import VsphereFault

TITLE = "vSphere"
"""The heading of its column in the fault tables."""

_VM_POWER = ("VirtualMachine.Interact.PowerOff", "VirtualMachine.Interact.PowerOn")


def _moved(fault: Any) -> bool:
    options: VsphereFault = fault.section("vsphere", VsphereFault) or VsphereFault()
    return options.restart_on != "same"


WAYS: dict[str, tuple[Way, ...]] = {
    "host-kill": (
        Way(
            "power off the VM, or every VM on its ESXi host (scope host); powered "
            "on on another host (vsphere.restart_on)",
            when=When("vsphere.restart_on", _moved),
            privileges=(*_VM_POWER, "Resource.ColdMigrate"),
        ),
        Way(
            "power off the VM, or every VM on its ESXi host (scope host)",
            privileges=_VM_POWER,
        ),
    ),
    "host-freeze": (
        Way(
            "suspend the VM, then power it on",
            privileges=(
                "VirtualMachine.Interact.Suspend",
                "VirtualMachine.Interact.PowerOn",
            ),
        ),
    ),
    "iops-throttle": (
        Way(
            "the disk's storageIOAllocation.limit, restored exactly",
            privileges=(
                "VirtualMachine.Config.Resource",
                "VirtualMachine.Config.EditDevice",
            ),
        ),
    ),
    "volume-detach": (
        Way(
            "remove the disk (its file kept) and add it back",
            privileges=(
                "VirtualMachine.Config.RemoveDisk",
                "VirtualMachine.Config.AddExistingDisk",
                "Datastore.Browse",
            ),
        ),
    ),
    "network-partition": (
        Way(
            "disconnect the NIC: its link goes down, established connections are "
            "cut too (isolate_from all, shape one)",
            privileges=("VirtualMachine.Interact.DeviceConnection",),
        ),
    ),
    "zone-outage": (
        Way(
            "way kill: every member's VM in the cluster (the compute cluster of the ESXi host "
            "a member's VM runs on, whatever its tags say) powered off at once, powered on on "
            "revert; way isolate refused (a NIC disconnected cuts the zone's members off from "
            "each other too)",
            when=When("way: kill", lambda fault: fault.way == "kill"),
            privileges=_VM_POWER,
        ),
    ),
}
"""Each kind → its ways (vSphere has no engines); `injectors` has their factories."""
