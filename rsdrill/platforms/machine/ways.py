"""What the sandbox and local platforms do for each kind they carry out (one column of the fault
tables, "sandbox / local": both fault member processes of this machine the same way)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rsdrill.faults import DiskFault


from rsdrill.faults.spec import Way, When

TITLE = "sandbox / local"
"""The heading of their column in the fault tables."""


def _one_copy(fault: DiskFault) -> bool:
    return fault.replica is not None


WAYS: dict[str, tuple[Way, ...]] = {
    "host-kill": (
        Way(
            "SIGKILL, restart after a delay, volume keep or wipe; with the HA model "
            "the process boots for `boot` before the member starts"
        ),
    ),
    "host-freeze": (Way("SIGSTOP, then SIGCONT"),),
    "clock-skew": (
        Way(
            "sandbox: the emulator's clock; local: libfaketime (installed here, "
            "else refused by `rsdrill check`): the run restarts each member under it "
            "at offset 0, one at a time, then moves CLOCK_REALTIME only through its "
            "offset file, within about 2 s (no `clock_drift`: libfaketime's rate "
            "counts from the process's start)"
        ),
    ),
    "cpu-starve": (Way("cgroup v1 cpu.cfs_quota_us on the member's process"),),
    "memory-pressure": (Way("cgroup v1 memory.limit_in_bytes; restart after the OOM kill"),),
    "disk-fill": (
        Way(
            "a real file on the member's own filesystem, freed on revert: sandbox, "
            "a 64 MiB tmpfs per member; local, the member's `dbpath`, which must be "
            "a filesystem of its own the user mounted and sized (tmpfs, loop "
            "device, volume; a shared disk or a FUSE mount is refused)"
        ),
    ),
    "disk-fault": (
        Way(
            "faultfs with `replica`: one of the two copies of a mirrored sandbox "
            "member's data (`target.sandbox.mirror`) fails, masked by the other, "
            "resynced in the background on revert",
            when=When("replica", _one_copy),
        ),
        Way("faultfs: an errno share and/or latency per operation"),
    ),
    "iops-throttle": (Way("faultfs token buckets (IOPS, bandwidth) and latency"),),
    "volume-detach": (Way("faultfs: every operation fails"),),
    "network-partition": (
        Way("nftables on loopback: established connections are cut too; every shape, flapping"),
    ),
    "zone-outage": (
        Way(
            "way kill: SIGKILL of every member process of the zone, restarted on their "
            "data; way isolate: nftables on loopback cut each of them off from the other "
            "zones' members and from clients, both ways, links inside the zone kept"
        ),
    ),
    "network-degrade": (
        Way(
            "a pacing TCP proxy per member link (nftables redirect); loss as "
            "TCP retransmission stalls; duplicate, corrupt and reorder refused (TCP "
            "hands the application in-order bytes only)"
        ),
    ),
    "data-loss": (Way("SIGKILL and the data directory wiped", "one-way"),),
}
"""Each kind → how a member process of this machine is given it (`INJECTORS` has its injector)."""
