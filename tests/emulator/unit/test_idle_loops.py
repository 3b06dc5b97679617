"""A member's periodic loops sleep until they could act: the liveness check until the majority's
contact expires (or the member becomes primary), the journal until something is written. Here
on real members, in process: a primary whose majority falls silent steps down when that contact
turns electionTimeout old, and a write not asked to be journaled is still durable within one
commit interval of its write, while an idle member's loops do not wake; journaled writes that
come while a commit runs share the next one."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path

from rsdrill.sandbox.config import MemberSpec, Settings, build_topology
from rsdrill_emulator import replconfig
from rsdrill_emulator.configid import ConfigId
from rsdrill_emulator.heartbeat import liveness_loop, majority_contact_expires
from rsdrill_emulator.journal import journal_loop
from rsdrill_emulator.node import MemberState, Node


def _member(tmp_path: Path, topology: str, *, timeout_ms: int = 10_000, index: int = 0) -> Node:
    settings = Settings(election_timeout_ms=timeout_ms)
    spec = build_topology(topology, port_base=27300, settings=settings)
    node = Node(spec, spec.members[index].host, tmp_path)
    node.boot(initiate=True)
    return node


def test_the_majority_s_contact_expires_with_the_contact_that_completes_it(tmp_path: Path) -> None:
    node = _member(tmp_path, "rs3")
    first, second = node.peers.values()
    assert majority_contact_expires(node, 10.0) == float("-inf")  # nobody heard yet
    first.last_contact_mono, second.last_contact_mono = 100.0, 103.0
    # Two of three: itself and the newest contact, until that one turns 10 s old.
    assert majority_contact_expires(node, 10.0) == 113.0
    second.spec = dataclasses.replace(second.spec, votes=0, priority=0)
    assert majority_contact_expires(node, 10.0) == 110.0  # a non-voter does not count
    assert majority_contact_expires(_member(tmp_path / "rs1", "rs1"), 10.0) is None


def test_a_primary_steps_down_when_its_majority_s_contact_turns_a_timeout_old(
    tmp_path: Path,
) -> None:
    timeout_s = 0.3

    async def scenario() -> tuple[float, MemberState]:
        node = _member(tmp_path, "rs3", timeout_ms=int(timeout_s * 1000))
        for peer in node.peers.values():
            peer.last_contact_mono = time.monotonic()
        loop = asyncio.create_task(liveness_loop(node))
        await asyncio.sleep(0.05)  # a secondary: the loop waits for a state change
        node.set_state(MemberState.PRIMARY, reason="test")
        began = time.monotonic()
        while node.state is MemberState.PRIMARY and time.monotonic() - began < 3:
            await asyncio.sleep(0.01)
        loop.cancel()
        return time.monotonic() - began, node.state

    took, state = asyncio.run(scenario())
    assert state is MemberState.SECONDARY
    # The contacts were 0.05 s old when it became primary: it steps down once they are 0.3 s
    # old, not at some later recheck.
    assert 0.15 <= took <= 0.6, took


def test_a_primary_that_a_new_config_leaves_without_a_majority_steps_down_at_once(
    tmp_path: Path,
) -> None:
    """Its sleep counted the old config's voters: the config's adoption must end it."""

    async def scenario() -> tuple[float, MemberState]:
        node = _member(tmp_path, "rs3")
        heard, _silent = node.peers.values()
        heard.last_contact_mono = time.monotonic()  # itself and one of three: a majority
        node.set_state(MemberState.PRIMARY, reason="test")
        loop = asyncio.create_task(liveness_loop(node))
        await asyncio.sleep(0.1)  # asleep until that contact is 10 s old
        assert node.state is MemberState.PRIMARY
        newcomer = MemberSpec(id=9, host="127.0.0.1:27309")
        config_id = ConfigId(node.config_id.version + 1, node.config_id.term)
        replconfig.install(node, (*node.spec.members, newcomer), config_id, why="test")
        began = time.monotonic()  # two of four now: no majority
        while node.state is MemberState.PRIMARY and time.monotonic() - began < 3:
            await asyncio.sleep(0.01)
        loop.cancel()
        return time.monotonic() - began, node.state

    took, state = asyncio.run(scenario())
    assert state is MemberState.SECONDARY
    assert took <= 0.5, took


async def _wakeups(seconds: float) -> int:
    """How often this event loop sleeps and is woken in `seconds`, with only its current tasks
    to run (its waits for I/O or a timer: a poll with nothing to wait for is not one)."""
    selector = asyncio.get_running_loop()._selector  # type: ignore[attr-defined]
    select = selector.select
    count = 0

    def counted(timeout: float | None = None) -> object:
        nonlocal count
        count += timeout != 0
        return select(timeout)

    selector.select = counted
    try:
        await asyncio.sleep(seconds)
    finally:
        selector.select = select
    return count


def test_idle_a_member_s_journal_and_liveness_loops_do_not_wake(tmp_path: Path) -> None:
    async def scenario() -> int:
        node = _member(tmp_path, "rs3")
        await node.flush()
        loops = [asyncio.create_task(journal_loop(node)), asyncio.create_task(liveness_loop(node))]
        await asyncio.sleep(0.01)
        woken = await _wakeups(0.5)
        for loop in loops:
            loop.cancel()
        return woken

    # The sleep's own wake-up, and no more (a poll every 0.1 s would add ten).
    assert asyncio.run(scenario()) <= 2


def test_a_commit_before_the_journal_s_interval_ends_its_wait(tmp_path: Path) -> None:
    """A j:true write (or a secondary's batch) commits at once: the journal loop, cued by the
    write, must not wake at the end of its interval to find nothing left to commit."""

    async def scenario() -> int:
        node = _member(tmp_path, "rs1")
        interval = node.spec.journal_commit_interval_ms / 1000
        await node.flush()
        loop = asyncio.create_task(journal_loop(node))
        await asyncio.sleep(0.01)
        woken = 0
        for _ in range(5):
            node.set_meta("written", True)
            await asyncio.sleep(0)  # the loop takes its cue
            await node.flush()
            woken += await _wakeups(2 * interval)
        loop.cancel()
        return woken

    # Each sleep's own wake-up (five); the loop's timer firing after each commit would be five more.
    assert asyncio.run(scenario()) <= 7


def test_a_write_is_durable_within_a_commit_interval(tmp_path: Path) -> None:
    async def scenario() -> tuple[float, bool]:
        node = _member(tmp_path, "rs1")
        interval = node.spec.journal_commit_interval_ms / 1000
        await node.flush()
        loop = asyncio.create_task(journal_loop(node))
        await asyncio.sleep(2 * interval)
        node.set_meta("written", True)
        written = time.monotonic()
        while node.database.dirty and time.monotonic() - written < 3:
            await asyncio.sleep(0.005)
        took = time.monotonic() - written
        loop.cancel()
        return took / interval, node.database.dirty

    intervals, dirty = asyncio.run(scenario())
    assert not dirty
    assert intervals <= 3, intervals  # within its interval (a missed cue would take 60 s)


def test_j_writes_that_come_while_a_commit_runs_share_the_next_one(tmp_path: Path) -> None:
    """One flush task for all of them, not one each waiting its turn at the lock; every write
    is durable once it has run, and none waits for more than the commit after it."""

    async def scenario() -> tuple[int, int, int]:
        node = _member(tmp_path, "rs1")
        node.set_state(MemberState.PRIMARY, reason="test")
        node.writable = True  # as an election ends
        commits = node.commits
        node.write("i", "db.c", {"_id": 0})
        node.ask_flush()
        await asyncio.sleep(0)  # that flush begins: its commit is on the storage thread
        tasks = len(asyncio.all_tasks())
        for n in range(1, 4):
            node.write("i", "db.c", {"_id": n})
            node.ask_flush()
        asked = len(asyncio.all_tasks()) - tasks
        began = time.monotonic()
        while node.last_durable < node.last_applied and time.monotonic() - began < 5:
            await asyncio.sleep(0.005)
        return asked, node.commits - commits, node.store.count("db.c")

    asked, commits, documents = asyncio.run(scenario())
    assert asked == 1  # three asks, one task
    # The one running, then one for the three; or the running one alone, when its thread
    # reached COMMIT after the three were written (a loaded machine).
    assert commits in (1, 2), commits
    assert documents == 4
