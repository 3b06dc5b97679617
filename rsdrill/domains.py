"""Failure domains: where each member lives (a zone, a region, a data centre), as replica-set
member tags say or its platform knows, and which domain's loss takes a replica set's voting
majority with it.

MongoDB's rule: a primary needs a majority of the voting members (members[].votes) to be
elected and to stay primary. A layout where one domain holds that many votes (two data centres
with 2+1 members) loses its primary with that domain, and gets it back only when the domain
returns or by a forced reconfiguration of the survivors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

ZONE_TAGS = ("zone", "az", "dc", "datacenter", "rack")
"""Member tag names read as the member's zone, first found wins (MongoDB prescribes none; these
are the names its documentation's examples and operators use)."""
REGION_TAGS = ("region",)
STANDALONE_ZONES = "zones are replica-set member tags: a standalone server has none"


def spread(zones: Sequence[str], count: int) -> list[str]:
    """Each of `count` members' zone: the given zones round-robin in member order (a, b, c over
    five members: a, b, c, a, b; a, a, b over three: two data centres, 2+1)."""
    if not zones:
        return []
    if any(not z or z != z.strip() for z in zones):
        raise ValueError(f"zone names must be non-empty words: {', '.join(map(repr, zones))}")
    if len(zones) > count:
        raise ValueError(f"{len(zones)} zones for {count} member(s): a zone nobody is in")
    return [zones[i % len(zones)] for i in range(count)]


@dataclass(frozen=True)
class Placement:
    """Where one member lives, and what its vote counts."""

    host: str
    votes: int
    zone: str | None = None
    region: str | None = None
    tags: tuple[tuple[str, str], ...] = ()


def planned(zones: Sequence[str], count: int) -> list[Placement]:
    """A set not built yet (a sandbox of `count` voting members): its members by number."""
    return [Placement(f"member {i}", 1, zone, tags=(("zone", zone),))
            for i, zone in enumerate(spread(zones, count))]  # fmt: skip


def placement(host: str, votes: int, tags: Mapping[str, str]) -> Placement:
    """A member's domains from its replica-set tags."""
    zone = next((str(tags[k]) for k in ZONE_TAGS if k in tags), None)
    region = next((str(tags[k]) for k in REGION_TAGS if k in tags), None)
    return Placement(host, votes, zone, region, tuple((str(k), str(v)) for k, v in tags.items()))


@dataclass(frozen=True)
class PlatformPlace:
    """Where a platform runs one member, whatever its replica-set tags say: its zone, its region
    and tags of the platform's own (vSphere: the ESXi host)."""

    zone: str | None = None
    region: str | None = None
    tags: tuple[tuple[str, str], ...] = ()


def placed_by_platform(
    members: Sequence[Placement], where: Mapping[str, PlatformPlace]
) -> list[Placement]:
    """`members` (from their tags) with the zone and region a platform knows them in instead,
    and its tags over theirs (`where`: host → its place); a member only the platform knows
    counts one vote."""

    def placed(m: Placement, at: PlatformPlace) -> Placement:
        tags = tuple({**dict(m.tags), **dict(at.tags)}.items())
        return replace(m, zone=at.zone or m.zone, region=at.region or m.region, tags=tags)

    known = {m.host for m in members}
    out = [placed(m, where[m.host]) if m.host in where else m for m in members]
    return out + [Placement(h, 1, p.zone, p.region, p.tags)
                  for h, p in where.items() if h not in known]  # fmt: skip


def domains_held(members: Sequence[Placement], key: str) -> str:
    """What the members' tags place them in, for a message about a domain nobody is in: their
    zones, regions or tags (`key`: zone, region or tag)."""
    if key == "tag":
        held = dict.fromkeys(f"{k}={v}" for m in members for k, v in m.tags)
        return f"the members' tags: {', '.join(held)}" if held else "no member has a tag"
    held = dict.fromkeys(getattr(m, key) for m in members if getattr(m, key))
    if not held:
        names = ", ".join(ZONE_TAGS if key == "zone" else REGION_TAGS)
        return f"no member has a {key} tag ({names})"
    plural = "zones" if key == "zone" else "regions"
    return f"the members' {plural}: {', '.join(held)}"


def by_zone(members: Sequence[Placement]) -> dict[str, list[Placement]]:
    """The members of each zone, zones in the order first met (members without one: '')."""
    out: dict[str, list[Placement]] = {}
    for m in members:
        out.setdefault(m.zone or "", []).append(m)
    return out


def majority_losing_zones(members: Sequence[Placement]) -> list[str]:
    """The zones whose loss alone leaves fewer than a majority of the votes: with one of them
    gone the set has no primary. Empty when no member has a zone."""
    total = sum(m.votes for m in members)
    majority = total // 2 + 1
    if not any(m.zone for m in members):
        return []
    return [zone for zone, held in by_zone(members).items()
            if zone and total - sum(m.votes for m in held) < majority]  # fmt: skip


def describe(members: Sequence[Placement]) -> str:
    """The members by zone, in one line ("zone a: h1, h2; zone b: h3")."""
    return "; ".join(f"{f'zone {zone}' if zone else 'no zone'}: "
                     + ", ".join(m.host for m in held)
                     for zone, held in by_zone(members).items())  # fmt: skip


def majority_warning(members: Sequence[Placement]) -> str | None:
    """What losing one zone costs, when it costs the primary (MongoDB's majority rule)."""
    losing = majority_losing_zones(members)
    if not losing:
        return None
    total = sum(m.votes for m in members)
    zones = by_zone(members)
    parts = [f"zone {z} holds {sum(m.votes for m in zones[z])} of {total} votes" for z in losing]
    return (f"{'; '.join(parts)}: losing {'it' if len(losing) == 1 else 'one of them'} leaves "
            "no voting majority, so no primary until it returns or the survivors are "
            "reconfigured with force")  # fmt: skip


def summary(members: Sequence[Placement]) -> str:
    """The members by zone, with the majority warning when there is one."""
    warning = majority_warning(members)
    return describe(members) + (f" ({warning})" if warning else "")
