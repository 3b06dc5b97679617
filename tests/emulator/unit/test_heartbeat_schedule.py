"""Heartbeats as mongod schedules them: a secondary answers a new primary's heartbeat with one of
its own at once (so the new primary, whose liveness check counts from its win, hears from it in
time), and a member without a sync source heartbeats at a quarter of the interval. On real
members, in process."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from rsdrill.sandbox.config import Settings, build_topology
from rsdrill_emulator import wallclock
from rsdrill_emulator.election import _become_primary
from rsdrill_emulator.heartbeat import handle_heartbeat, heartbeat_interval_s, heartbeat_request
from rsdrill_emulator.node import MemberState, Node

SETTINGS = Settings(election_timeout_ms=1000, heartbeat_interval_ms=2000)


def _members(tmp_path: Path) -> tuple[Node, Node]:
    spec = build_topology("rs3", port_base=27300, settings=SETTINGS)
    new_primary = Node(spec, spec.members[1].host, tmp_path / "a")
    secondary = Node(spec, spec.members[2].host, tmp_path / "b")
    for node in (new_primary, secondary):
        node.boot(initiate=True)
    return new_primary, secondary


def test_a_new_primarys_heartbeat_is_answered_with_one_at_once(tmp_path: Path) -> None:
    async def woken(sender_state: MemberState, primary_known: bool) -> bool:
        sender, secondary = _members(tmp_path / sender_state.name / str(primary_known))
        sender.term = secondary.term = 2
        sender.state = sender_state
        if primary_known:
            secondary.primary_host = sender.host
        waiting = asyncio.ensure_future(secondary.heartbeat_now.wait(5.0))
        await asyncio.sleep(0)
        reply = handle_heartbeat(secondary, heartbeat_request(sender))
        assert reply["ok"] == 1.0
        done, _ = await asyncio.wait({waiting}, timeout=0.5)
        waiting.cancel()
        return bool(done)

    assert asyncio.run(woken(MemberState.PRIMARY, primary_known=False))
    # Not for a primary it already knew, nor for another secondary's heartbeat.
    assert not asyncio.run(woken(MemberState.PRIMARY, primary_known=True))
    assert not asyncio.run(woken(MemberState.SECONDARY, primary_known=False))


def test_a_member_without_a_sync_source_heartbeats_four_times_as_often(tmp_path: Path) -> None:
    _, secondary = _members(tmp_path)
    secondary.state = MemberState.SECONDARY
    secondary.sync_source = "127.0.0.1:27300"
    assert heartbeat_interval_s(secondary) == 2.0
    secondary.sync_source = ""
    # A quarter of 2 s, and never more than half the 1 s election timeout.
    assert heartbeat_interval_s(secondary) == 0.5
    secondary.state = MemberState.PRIMARY
    assert heartbeat_interval_s(secondary) == 2.0


def test_a_new_primary_counts_every_members_liveness_from_its_win(tmp_path: Path) -> None:
    """As mongod restarting its heartbeats on a win: a member last heard from long ago (a frozen
    old primary) is marked down one election timeout after the win, not at once."""

    async def contacts() -> tuple[float, list[float | None]]:
        node, _ = _members(tmp_path)
        node.term = 2
        node.state = MemberState.SECONDARY
        for peer in node.peers.values():
            peer.last_contact_mono = time.monotonic() - 60
        won = time.monotonic()
        await _become_primary(node, [], "test", wallclock.now())
        return won, [p.last_contact_mono for p in node.peers.values()]

    won, seen = asyncio.run(contacts())
    assert all(t is not None and t >= won for t in seen), (won, seen)
