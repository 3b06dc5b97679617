"""A member that grants its vote restarts its election timer before it makes the vote durable.
CI46's finding: two secondaries' timers ran out within milliseconds of each other; one was
elected, and the other, its timer still expired while its vote for the winner was written,
stood in the next term and deposed it: 10 s more without a primary (a second election
timeout). Here on a real member, in process, with the vote's write held up."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from bson.int64 import Int64

from rsdrill.sandbox.config import Settings, build_topology
from rsdrill_emulator import election
from rsdrill_emulator.election import handle_request_votes, run_election
from rsdrill_emulator.node import MemberState, Node
from rsdrill_emulator.peer import PeerError


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


def test_after_a_split_vote_the_next_try_counts_from_the_last_one_s_start(tmp_path: Path) -> None:
    """CI's minority partition: both secondaries stood at once, each refused the other, and
    each waited out the cut-off primary's vote for an election timeout. mongod restarts the
    timer only when an attempt begins, so the next one comes within the offset; a timer
    restarted on the loss put it a whole timeout later, after the 6 s partition had healed."""
    timeout_s = 0.4

    async def scenario() -> tuple[bool, float, float]:
        settings = Settings(election_timeout_ms=int(timeout_s * 1000))
        spec = build_topology("rs3", port_base=27200, settings=settings)
        node = Node(spec, spec.members[1].host, tmp_path)
        node.boot(initiate=True)
        cut_off = spec.members[0].host

        async def call(host: str, cmd: dict[str, Any], **_: Any) -> dict[str, Any]:
            if host == cut_off:  # no answer: the request times out
                await asyncio.sleep(timeout_s)
                raise PeerError(f"{host}: timed out")
            # The other secondary, standing too, grants dry runs and keeps its real vote.
            return {"ok": 1.0, "term": cmd["term"], "voteGranted": bool(cmd["dryRun"])}

        node.peer_calls.call = call  # type: ignore[method-assign]
        started = time.monotonic()
        won = await run_election(node, reason="election timeout")
        return won, time.monotonic() - started, node.election_deadline - started

    won, took, deadline = asyncio.run(scenario())
    assert not won
    assert took >= timeout_s  # it did wait for the cut-off voter
    # Due one timeout plus at most 15 % after the attempt began: at most 60 ms after the loss.
    assert timeout_s <= deadline <= 1.15 * timeout_s + 0.01, (took, deadline)


def test_a_reset_after_the_deadline_passed_is_kept_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A timer whose deadline passed while the member could not stand (a primary) sleeps up to
    TIMER_RECHECK_S; a reset then (a secondary again, hearing from the new primary) must wake
    it, or with an election timeout under that sleep the member stands late."""
    timeout_s = 0.3

    async def scenario() -> float:
        settings = Settings(election_timeout_ms=int(timeout_s * 1000))
        spec = build_topology("rs3", port_base=27200, settings=settings)
        node = Node(spec, spec.members[1].host, tmp_path)
        node.boot(initiate=True)
        stood: asyncio.Future[float] = asyncio.get_running_loop().create_future()

        async def stand(_: Node, reason: str) -> None:
            if not stood.done():
                stood.set_result(time.monotonic())
            await asyncio.sleep(10)

        monkeypatch.setattr(election, "run_election", stand)
        node.state = MemberState.PRIMARY  # as it was: its deadline long past, nothing to stand for
        node.election_deadline = 0.0
        timer = asyncio.ensure_future(election.election_timer_loop(node))
        await asyncio.sleep(0.05)  # the timer sleeps its recheck
        node.state = MemberState.SECONDARY  # stepped down, not woken by that
        reset = time.monotonic()
        node.reset_election_timer()
        try:
            return await asyncio.wait_for(stood, 5) - reset
        finally:
            timer.cancel()

    waited = asyncio.run(scenario())
    assert 2 * timeout_s < election.TIMER_RECHECK_S  # else this checks nothing
    assert timeout_s - 0.01 <= waited <= 1.15 * timeout_s + 0.3, waited  # not woken: ~0.95 s
