"""Priority takeover, as mongod schedules it: a secondary that sees a primary of lower priority
than its own, and is fresh enough, stands for election after (rank + 1) election timeouts plus
the election timer's random offset, its rank being how many members have a higher priority
(so the highest-priority member goes first). Fresh enough (mongod's
`_amIFreshEnoughForPriorityTakeover`): its last applied optime is in the term of the latest
one it knows of, and within priorityTakeoverFreshnessWindowSeconds (2) of it. Each heartbeat
from the primary schedules the takeover or, when it no longer applies, cancels it; when it is
due the conditions are checked again."""

from __future__ import annotations

import random
import time

from rsdrill_emulator.node import Node

FRESHNESS_WINDOW_S = 2


def consider(node: Node, primary: str) -> None:
    """`primary` was heard as the primary: schedule a takeover, or cancel one that no longer
    applies."""
    if not _may_take_over(node, primary):
        node.takeover_at = None
    elif node.takeover_at is None:
        timeout = node.spec.settings.election_timeout_ms / 1000
        rank = sum(1 for m in node.spec.members if m.priority > node.me.priority)
        node.takeover_at = (
            time.monotonic() + (rank + 1) * timeout + random.uniform(0, 0.15 * timeout)
        )
        node.timer_changed.fire()


def due(node: Node) -> bool:
    """True (once) when a scheduled takeover is due and still applies."""
    if node.takeover_at is None or time.monotonic() < node.takeover_at:
        return False
    node.takeover_at = None
    return node.primary_host is not None and _may_take_over(node, node.primary_host)


def _may_take_over(node: Node, primary: str) -> bool:
    peer = node.peers.get(primary)
    if peer is None or not node.is_electable() or peer.spec.priority >= node.me.priority:
        return False
    mine = node.last_applied
    latest = max([mine, *(p.applied for p in node.peers.values() if p.health)])
    return mine.term == latest.term and latest.secs - mine.secs <= FRESHNESS_WINDOW_S
