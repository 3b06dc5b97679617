"""Group commit: what is written becomes durable within one journal commit interval, all of it
in one fsync, as mongod's journal flusher makes unjournaled writes durable."""

from __future__ import annotations

from rsdrill_emulator.node import Node

# Every write fires `written`; the idle wait ends on it, this is only a safety net.
IDLE_RECHECK_S = 60.0


async def journal_loop(node: Node) -> None:
    """Idle, the loop sleeps until the first write after a commit (a wake-up per interval
    would be most of an idle member's CPU), then waits one interval for more to come."""
    interval = node.spec.journal_commit_interval_ms / 1000
    while True:
        if not unflushed(node):
            await node.written.wait(IDLE_RECHECK_S)
            continue
        # A commit meanwhile (a j:true writer's, a secondary's batch) takes the writes and ends
        # the wait: its timer would otherwise wake the loop for nothing.
        commits = node.commits
        await node.committed.wait(interval)
        if node.commits == commits and unflushed(node):
            await node.flush()


def unflushed(node: Node) -> bool:
    return node.database.dirty or node.last_durable < node.last_applied
