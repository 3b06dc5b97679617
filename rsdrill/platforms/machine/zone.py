"""zone-outage on this machine: every member process of a zone killed, or the zone cut off from
the other members and from clients by nftables (its members keep their links to each other).
One injector per member of the zone, as the run builds them: each kill or cut is its own, so
each is journaled and reverted as a host-kill or a network-partition of that member is."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rsdrill.faults import HostKillFault, SelectDomain
from rsdrill.layout import ShardedLayout, same_set
from rsdrill.platforms.base import Injector
from rsdrill.platforms.domain_members import members_in
from rsdrill.platforms.machine.disk import host_kill
from rsdrill.platforms.machine.network import NetworkPartition

if TYPE_CHECKING:
    from rsdrill.faults import ZoneOutageFault
    from rsdrill.platforms.base import MachineTarget


def zone_outage(target: MachineTarget, fault: ZoneOutageFault, host: str) -> Injector:
    """The zone's outage at `host`, one of its members."""
    if fault.way == "kill":
        kill = HostKillFault(kind="host-kill", at=fault.at, select=fault.select,
                             duration=fault.duration)  # fmt: skip
        return host_kill(target, kill, host)
    assert isinstance(fault.select, SelectDomain)  # the kind's check
    layout = getattr(target, "layout", None)
    members = same_set(target.members, layout if isinstance(layout, ShardedLayout) else None, host)
    inside = members_in(target, fault.select, host, members)
    outside = [m for m in members if m not in inside]
    return NetworkPartition(target.hosts, host, members, isolate_from="all", direction="both",
                            peers=outside)  # fmt: skip
