"""Waiting for a write's write concern on the primary: until the members it names have the
write (journaled, with `j`), the primary is deposed, or `wtimeout` passes."""

from __future__ import annotations

import time
from typing import Any

from rsdrill_emulator.errors import CommandError, write_concern_error
from rsdrill_emulator.node import MemberState, Node
from rsdrill_emulator.oplog import OpTime


async def wait_for(
    node: Node, optime: OpTime, write_concern: dict[str, Any]
) -> dict[str, Any] | None:
    """Block until the write concern holds; the `writeConcernError` if it never does."""
    w = write_concern.get("w", node.spec.implicit_default_w)
    if w == 0:
        return None
    if isinstance(w, str) and w != "majority":
        raise CommandError(79, f"unrecognized write concern mode: {w}")
    if isinstance(w, int | float) and int(w) > len(node.spec.data_bearing):
        # As mongod: the write is done, its write concern can never be.
        return write_concern_error(
            100, "Not enough data-bearing nodes", writeConcern=dict(write_concern)
        )
    j = bool(write_concern.get("j", w == "majority"))
    if j:
        node.ask_flush()
    timeout_ms = int(write_concern.get("wtimeout", 0) or 0)
    deadline = time.monotonic() + timeout_ms / 1000 if timeout_ms else None
    term = node.term

    def deposed() -> bool:
        return node.term != term or node.state is not MemberState.PRIMARY

    def settled() -> bool:  # what wakes this waiter: not every position report
        return deposed() or node.acknowledged(optime, w, j)

    while True:
        # The term first: a stepdown fails every waiter at once, as mongod's does, so a position
        # counted after it (a new-term member's, in the same message that deposed us) never
        # acknowledges a write of the old term.
        if deposed():
            return write_concern_error(189, "Primary stepped down while waiting for replication")
        if node.acknowledged(optime, w, j):
            return None
        remaining = 1.0 if deadline is None else deadline - time.monotonic()
        if remaining <= 0:
            return write_concern_error(64, "waiting for replication timed out", wtimeout=True)
        await node.progress.wait(min(remaining, 1.0), settled)
