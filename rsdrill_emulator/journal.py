"""Group commit: what is written becomes durable within one journal commit interval, all of it
in one fsync, as mongod's journal flusher makes unjournaled writes durable."""

from __future__ import annotations

import asyncio

from rsdrill_emulator.node import Node


class _Flusher:
    """A timer armed by the first write after a commit and disarmed by the next commit.

    Callbacks rather than a task that waits: under a j:true load every write dirties the
    database and every write's own commit cleans it, and a task woken twice per write, with a
    future and a timer each time, was a twentieth of a member's work per insert."""

    def __init__(self, node: Node, loop: asyncio.AbstractEventLoop) -> None:
        self.node = node
        self.loop = loop
        self.interval = node.spec.journal_commit_interval_ms / 1000
        self.timer: asyncio.TimerHandle | None = None
        self.flushing: asyncio.Task[None] | None = None  # held: the loop keeps weak references

    def written(self) -> None:
        """The database went dirty: commit within an interval unless a commit comes first."""
        if self.timer is None:
            self.timer = self.loop.call_later(self.interval, self._due)

    def committed(self) -> None:
        """A commit (a j:true writer's, a secondary's batch) took the writes: what came after
        it waits an interval from now, and nothing else does."""
        self.stop()
        if unflushed(self.node):
            self.written()

    def stop(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _due(self) -> None:
        self.timer = None
        if unflushed(self.node):
            self.flushing = self.loop.create_task(self.node.flush())


async def journal_loop(node: Node) -> None:
    """Idle, nothing wakes (a wake-up per interval would be most of an idle member's CPU)."""
    flusher = _Flusher(node, asyncio.get_running_loop())
    node.database.on_dirty, node.on_commit = flusher.written, flusher.committed
    try:
        if unflushed(node):  # written before the journal started
            flusher.written()
        await asyncio.Event().wait()  # until cancelled
    finally:
        node.database.on_dirty = node.on_commit = None
        flusher.stop()


def unflushed(node: Node) -> bool:
    return node.database.dirty or node.last_durable < node.last_applied
