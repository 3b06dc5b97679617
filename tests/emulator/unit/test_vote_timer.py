"""A member that grants its vote restarts its election timer before it makes the vote durable.
CI46's finding: two secondaries' timers ran out within milliseconds of each other; one was
elected, and the other, its timer still expired while its vote for the winner was written,
stood in the next term and deposed it: 10 s more without a primary (a second election
timeout). Here on a real member, in process, with the vote's write held up."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from bson.int64 import Int64

from rsdrill.sandbox.config import build_topology
from rsdrill_emulator.election import handle_request_votes
from rsdrill_emulator.node import Node


def test_the_election_timer_restarts_before_the_vote_is_durable(tmp_path: Path) -> None:
    async def scenario() -> tuple[float, bool]:
        spec = build_topology("rs3", port_base=27200)
        node = Node(spec, spec.members[2].host, tmp_path)
        node.boot(initiate=True)
        node.election_deadline = 0.0  # expired: this member would stand now

        async def slow_flush() -> None:
            await asyncio.sleep(0.3)

        node.flush = slow_flush  # type: ignore[method-assign]
        ask = {"replSetRequestVotes": 1, "term": Int64(1), "candidateIndex": 1,
               "dryRun": False, "lastAppliedOpTime": node.last_applied.document()}  # fmt: skip
        voting = asyncio.ensure_future(handle_request_votes(node, ask))
        await asyncio.sleep(0.05)  # the vote is being written
        remaining = node.election_deadline - time.monotonic()
        reply = await voting
        return remaining, bool(reply["voteGranted"])

    remaining, granted = asyncio.run(scenario())
    assert granted
    assert remaining > 5.0, remaining  # a whole election timeout (10 s) ahead, not expired
