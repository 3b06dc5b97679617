"""A sharded target's figures per replica set: each shard's write gap through the routers,
its failover, and the routers' retarget time; the config servers' failover.

Each set is judged on its own members' hello and status polls and the faults on them, with
the same functions as a replica set (analysis.failover, analysis.availability).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rsdrill.analysis.availability import unavailable_s
from rsdrill.analysis.failover import Failover, failover_parts, find_failover, no_primary_s
from rsdrill.history import FaultRecord, Op, of_probes, shard_write_probe
from rsdrill.layout import CONFIG
from rsdrill.result import SetFigures

_MEMBER_PROBES = ("failover", "recovery")


SetFailovers = dict[str, tuple[list[Op], Failover | None]]
"""Each set's own member polls and its failover, by the set's name (`set_failovers`)."""


def set_failovers(
    ops: Sequence[Op], faults: Sequence[FaultRecord], sets: Mapping[str, Sequence[str]]
) -> SetFailovers:
    """Each set's own member polls, and its failover (`find_failover` on them and the faults
    on its members)."""
    found = {}
    for name, hosts in sets.items():
        members = set(hosts)
        polls = [op for op in of_probes(ops, *_MEMBER_PROBES) if op.member in members]
        found[name] = polls, find_failover(polls, [f for f in faults if f.target in members])
    return found


def first_failover(by_set: SetFailovers) -> tuple[list[Op], Failover] | None:
    """The failover of whichever set a fault made fail over first, with that set's polls."""
    found = [(polls, f) for polls, f in by_set.values() if f]
    return min(found, key=lambda pair: pair[1].injected_at_s, default=None)


def longest_no_primary_s(figures: Mapping[str, SetFigures]) -> float | None:
    """The longest window in which one of the sets had no writable primary."""
    gaps = [f.no_primary_s for f in figures.values() if f.no_primary_s is not None]
    return max(gaps, default=None)


def set_figures(ops: Sequence[Op], by_set: SetFailovers) -> dict[str, SetFigures]:
    """Each set's figures by its name (`layout.sets()`'s: CONFIG for the config servers).

    - write_unavailable_s, writes, failed_writes: its shard's write probe
      (`history.shard_write_probe`), None/0 for the config servers;
    - failover_s, new_primary, detection_s, election_s, no_primary_s: as the replica-set
      metrics of the same names, from its members' polls and the faults on its members;
    - mongos_retarget_s: from that failover's new primary writable to the end of the first
      write of its shard's probe acknowledged after it (through whichever router): how long
      the routers took to send writes to the new primary. None without a failover.
    """
    figures = {}
    for name, (polls, failover) in by_set.items():
        probe = shard_write_probe(name)
        writes = of_probes(ops, probe)
        figure = SetFigures(
            write_unavailable_s=unavailable_s(writes, probe) if name != CONFIG else None,
            writes=len(writes),
            failed_writes=sum(not op.ok for op in writes),
            no_primary_s=no_primary_s(polls),
        )
        if failover is not None:
            parts = failover_parts(polls, failover)
            acked = [op.t_end for op in writes if op.ok and op.t_end >= failover.writable_at_s]
            figure.failover_s = failover.seconds
            figure.new_primary = failover.new_primary
            figure.detection_s = parts.detection_s
            figure.election_s = parts.election_s
            figure.mongos_retarget_s = min(acked) - failover.writable_at_s if acked else None
        figures[name] = figure
    return figures
