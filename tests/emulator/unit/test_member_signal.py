"""A member's wake-ups: a fire wakes every waiter at once, a timeout wakes one alone, and a
waiter that gave up leaves nothing behind; a fault's sleep on the member's loop (uvloop's) is
never short."""

from __future__ import annotations

import asyncio
import time

import uvloop

from rsdrill_emulator.notify import Signal, sleep_at_least


def test_a_fire_wakes_every_waiter_long_before_its_timeout() -> None:
    async def scenario() -> float:
        signal = Signal()
        started = time.monotonic()
        waiters = [asyncio.create_task(signal.wait(30)) for _ in range(3)]
        await asyncio.sleep(0.01)
        signal.fire()
        await asyncio.wait_for(asyncio.gather(*waiters), 5)
        assert not signal._waiters
        return time.monotonic() - started

    assert asyncio.run(scenario()) < 5


def test_a_waiter_alone_wakes_at_its_timeout_and_a_later_fire_is_not_kept() -> None:
    async def scenario() -> None:
        signal = Signal()
        started = time.monotonic()
        await signal.wait(0.05)
        assert time.monotonic() - started >= 0.04
        assert not signal._waiters  # a thousand timed-out waits would otherwise pile up
        signal.fire()  # nobody waits: the next wait still sleeps until its own wake-up
        started = time.monotonic()
        await signal.wait(0.05)
        assert time.monotonic() - started >= 0.04

    asyncio.run(scenario())


def test_a_cancelled_waiter_is_forgotten() -> None:
    async def scenario() -> None:
        signal = Signal()
        waiter = asyncio.create_task(signal.wait(30))
        await asyncio.sleep(0.01)
        assert len(signal._waiters) == 1
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        assert waiter.cancelled()
        assert not signal._waiters
        signal.fire()

    asyncio.run(scenario())


def test_a_sleep_at_least_is_never_shorter_on_the_members_loop() -> None:
    # uvloop rounds a timer to whole milliseconds and starts it from the loop's cached time:
    # a plain asyncio.sleep(0.0203) there ended up to 1.05 ms early in 200 tries.
    async def shortest() -> float:
        wanted, least = 0.0203, float("inf")
        for _ in range(100):
            started = time.monotonic()
            await sleep_at_least(wanted)
            least = min(least, time.monotonic() - started - wanted)
        return least

    assert uvloop.run(shortest()) >= 0
