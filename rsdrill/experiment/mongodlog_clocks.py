"""Members' logs on one clock: how far each member's clock was off, from what the logs agree on.

A member logs its own state transitions (id 21358) by its clock; the others log seeing them
(id 21215) by theirs, a heartbeat later at most (`LATENCY_S`: every 2 s by default, plus the
network). So for member Y seeing X's transitions, each pair gives
`Y's time - X's time = offset(Y) - offset(X) + latency`, with latency in [0, LATENCY_S]. A
transition seen is paired with every transition of X to that state within `MAX_SKEW_S`; the
deltas kept are the LATENCY_S-wide window that explains the most sightings. A clock is moved
only when no latency explains them (a sighting before the transition, or all of them later than
LATENCY_S), and then as if Y's quickest sighting was immediate; seen both ways, halfway. Only
changes a member sees count: its first sight of each member after it starts is no transition.
Members whose logs are not linked by any sighting keep their own clocks.
"""

from __future__ import annotations

import datetime as dt
from collections import deque
from collections.abc import Iterable
from dataclasses import replace

from rsdrill.experiment.mongodlog_read import LogEvent

LATENCY_S = 2.5
MAX_SKEW_S = 3600.0


def on_one_clock(events: list[LogEvent]) -> tuple[list[LogEvent], dict[str, float]]:
    """`events` in time order on the first observer's clock, and each observer's offset that
    was taken off (seconds; only those not 0)."""
    offsets = clock_offsets(events)
    moved = [_moved(e, dt.timedelta(seconds=offsets.get(e.observer, 0.0))) for e in events]
    # At one time, a member's own transition comes before another's sight of it.
    moved.sort(key=lambda e: (e.t, e.kind == "seen"))
    return moved, {o: round(s, 3) for o, s in offsets.items() if round(s, 3)}


def _moved(event: LogEvent, by: dt.timedelta) -> LogEvent:
    if not by:
        return event
    alive = event.last_alive - by if event.last_alive else None
    return replace(event, t=event.t - by, last_alive=alive)


def clock_offsets(events: list[LogEvent]) -> dict[str, float]:
    """Each observer's clock offset against the first observer of its linked group."""
    pairs = _pairs(events)
    links: dict[str, set[str]] = {}
    for y, x in pairs:
        links.setdefault(y, set()).add(x)
        links.setdefault(x, set()).add(y)
    offsets: dict[str, float] = {}
    for root in dict.fromkeys(e.observer for e in events):
        if root in offsets or root not in links:
            continue
        offsets[root] = 0.0
        queue = deque([root])
        while queue:
            x = queue.popleft()
            for y in sorted(links[x] - offsets.keys()):
                offsets[y] = offsets[x] + _relative(pairs.get((y, x), []), pairs.get((x, y), []))
                queue.append(y)
    return offsets


def _pairs(events: list[LogEvent]) -> dict[tuple[str, str], list[tuple[int, float]]]:
    """(observer Y, member X) → (sighting, Y's time - X's time) for each transition of X that
    Y may have seen."""
    own: dict[tuple[str, str | None], list[dt.datetime]] = {}
    for e in events:
        if e.kind == "transition" and e.host == e.observer:
            own.setdefault((e.host, e.new), []).append(e.t)
    last_seen: dict[tuple[str, str], str | None] = {}
    pairs: dict[tuple[str, str], list[tuple[int, float]]] = {}
    for n, e in enumerate(sorted(events, key=lambda e: (e.observer, e.t))):
        if e.kind == "transition" and e.host == e.observer and e.old == "STARTUP":
            for key in [k for k in last_seen if k[0] == e.observer]:
                del last_seen[key]  # restarted: its next sight of each member is its first
        if e.kind != "seen" or e.host == e.observer:
            continue
        before = last_seen.get((e.observer, e.host))
        last_seen[(e.observer, e.host)] = e.new
        if before is None or before == e.new:
            continue
        for t in own.get((e.host, e.new), []):
            delta = (e.t - t).total_seconds()
            if abs(delta) <= MAX_SKEW_S:
                pairs.setdefault((e.observer, e.host), []).append((n, delta))
    return pairs


def _relative(seen_by_y: list[tuple[int, float]], seen_by_x: list[tuple[int, float]]) -> float:
    """offset(Y) - offset(X): at most Y's quickest sighting of X; at least minus X's quickest
    of Y. Within what a heartbeat explains, 0; past it, the bound (one way) or halfway (both)."""
    upper, lower = _quickest(seen_by_y), _quickest(seen_by_x)
    if all(q is None or 0 <= q <= LATENCY_S for q in (upper, lower)):
        return 0.0
    if lower is None:
        return upper or 0.0
    if upper is None:
        return -lower
    return (upper - lower) / 2


def _quickest(pairs: Iterable[tuple[int, float]]) -> float | None:
    """The smallest delta of the window LATENCY_S wide that holds the most sightings (each
    counts once; of equals, the one where they are seen soonest): the other deltas pair a
    sighting with another transition to that state."""
    ordered = sorted(pairs, key=lambda p: p[1])
    best: tuple[int, float, float] | None = None
    end = 0
    for start, (_, low) in enumerate(ordered):
        while end < len(ordered) and ordered[end][1] - low <= LATENCY_S:
            end += 1
        soonest: dict[int, float] = {}
        for n, delta in ordered[start:end]:
            soonest.setdefault(n, delta - low)
        score = (-len(soonest), sum(soonest.values()), low)
        if best is None or score < best:
            best = score
    return None if best is None else best[2]
