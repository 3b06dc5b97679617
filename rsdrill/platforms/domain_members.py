"""Which members a failure domain holds when a zone-outage is injected: as their replica-set
tags place them now, and where the platform knows better (an EC2 instance's Availability Zone,
a Kubernetes node's zone label), as it places them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from rsdrill.deployment import read_placements
from rsdrill.domains import PlatformPlace, placed_by_platform
from rsdrill.platforms.base import InjectionError, PlacesMembers

if TYPE_CHECKING:
    from rsdrill.connection import ConnectOptions
    from rsdrill.faults import SelectDomain

_TAGS_TIMEOUT_S = 2.0


class Reaches(Protocol):
    """A run target as far as reading its members' tags goes."""

    @property
    def connect_options(self) -> ConnectOptions: ...


def platform_places(target: object) -> dict[str, PlatformPlace]:
    """Where its platform places each member (EC2: its instance's Availability Zone; vSphere:
    its VM's cluster, datacenter and ESXi host), empty where the platform does not say (the
    members' tags alone)."""
    return target.platform_placements() if isinstance(target, PlacesMembers) else {}


def members_in(
    target: Reaches, domain: SelectDomain, host: str, members: Sequence[str]
) -> list[str]:
    """The members of `host`'s set (`members`) in `domain`, `host` among them (refused if not:
    it moved since the run chose it)."""
    # Asked of `host` first: a zone-mate already cut off answers no client.
    ask = [host, *(m for m in members if m != host)]
    tagged = read_placements(ask, _TAGS_TIMEOUT_S, options=target.connect_options)
    placed = placed_by_platform(tagged, platform_places(target))
    inside = [p.host for p in placed if p.host in members and domain.matches(p)]
    if host not in inside:
        raise InjectionError(f"zone-outage: {host} is not in {domain} (as the members are "
                             "placed now)")  # fmt: skip
    return inside
