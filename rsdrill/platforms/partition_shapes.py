"""Jepsen's partition shapes as the member pairs they cut, for every platform that partitions
by member links (the sandbox and local nftables cut, Kubernetes NetworkChaos)."""

from __future__ import annotations

from typing import Literal

from rsdrill.platforms.base import InjectionError

PartitionShape = Literal["one", "halves", "bridge", "ring"]


def cut_pairs(shape: PartitionShape, target: str, members: list[str]) -> list[tuple[str, str]]:
    """The member pairs that cannot reach each other under `shape` (Jepsen's names), built
    around `target` (the member `select` chose from the live roles), the others in set order:

    - one: `target` alone against the rest;
    - halves: `target` and the fewest others that make a minority, against the majority;
    - bridge: the others split in two halves that only `target` reaches both of;
    - ring: members in a ring starting at `target`, each reaching only its two neighbours.
    """
    others = [m for m in members if m != target]
    if shape == "one":
        sides = [[target], others]
    elif shape == "halves":
        minority = [target, *others[: (len(members) - 1) // 2 - 1]]
        sides = [minority, [m for m in others if m not in minority]]
    elif shape == "bridge":
        if len(others) < 2:
            raise InjectionError("network-partition shape bridge needs at least 3 members")
        half = len(others) // 2
        sides = [others[:half], others[half:]]
    else:
        if len(members) < 4:
            raise InjectionError(
                f"network-partition shape ring: with {len(members)} members every member is "
                "its neighbours' neighbour, so nothing is cut (it needs at least 4)"
            )
        ring = [target, *others]
        n = len(ring)
        return [
            (ring[i], ring[j])
            for i in range(n)
            for j in range(i + 1, n)
            if (j - i) % n not in (1, n - 1)
        ]
    return [(a, b) for a in sides[0] for b in sides[1]]
