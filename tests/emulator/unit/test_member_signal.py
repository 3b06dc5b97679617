"""A member's wake-ups: a fire wakes every waiter at once (one that names its condition only
once that holds), a timeout wakes one alone, and a waiter that gave up leaves nothing behind;
a fault's sleep on the member's loop (uvloop's) is never short; the storage gate wakes the loop
from the commit's thread only for a waiter."""

from __future__ import annotations

import asyncio
import threading
import time

import uvloop

from rsdrill_emulator.notify import Gate, Signal, sleep_at_least


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


def test_a_waiter_that_names_its_condition_sleeps_through_fires_until_it_holds() -> None:
    """Eight writers waiting for w:majority used to wake at every position report; one woken
    only when its write is acknowledged resumes once. A check that raises wakes its waiter."""

    async def scenario() -> None:
        signal = Signal()
        position = 0
        woken: list[int] = []

        async def waiter(wants: int) -> None:
            while position < wants:
                await signal.wait(30, lambda: position >= wants)
                woken.append(wants)

        waiters = [asyncio.create_task(waiter(n)) for n in (1, 2, 3)]
        await asyncio.sleep(0.01)
        for reached in (1, 1, 2, 3):
            position = reached  # what the waiters' checks read
            signal.fire()
            await asyncio.sleep(0.01)
        await asyncio.wait_for(asyncio.gather(*waiters), 5)
        assert woken == [1, 2, 3]  # each once, though fired four times
        assert not signal._waiters

        def broken() -> bool:
            raise KeyError("gone")

        failing = asyncio.create_task(signal.wait(30, broken))
        await asyncio.sleep(0.01)
        signal.fire()
        await asyncio.wait_for(failing, 5)

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


def test_the_gate_wakes_the_loop_from_another_thread_only_for_a_waiter() -> None:
    async def scenario() -> tuple[int, int, bool]:
        loop = asyncio.get_running_loop()
        woken = 0
        wake = loop.call_soon_threadsafe

        def counted(*args: object) -> asyncio.Handle:
            nonlocal woken
            woken += 1
            return wake(*args)  # type: ignore[arg-type]

        loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
        gate = Gate()
        await gate.wait()  # open: passes at once
        gate.close()
        opener = threading.Thread(target=gate.open, args=(loop,))
        opener.start()
        opener.join()
        idle_wakes = woken  # nobody waited: the loop was not woken
        await gate.wait()
        gate.close()
        waiter = asyncio.create_task(gate.wait())
        await asyncio.sleep(0.01)
        assert not waiter.done()  # closed: it waits
        threading.Thread(target=gate.open, args=(loop,)).start()
        await asyncio.wait_for(waiter, 5)
        return idle_wakes, woken, waiter.done()

    idle_wakes, woken, released = asyncio.run(scenario())
    assert (idle_wakes, woken, released) == (0, 1, True)
