"""A member's wake-ups: loops and waiting commands sleep on a `Signal` until what they wait
for may have changed (positions, the commit point, the topology), or their timeout."""

from __future__ import annotations

import asyncio
import threading
import time


class Signal:
    """Wakes every waiter when something changed; waiters re-check their own condition.

    A future per waiter and a timer, not `wait_for` on an Event: that starts a task for each
    wait, and a write fires `progress` twice, each waking every loop that waits on it."""

    def __init__(self) -> None:
        self._waiters: set[asyncio.Future[None]] = set()

    def fire(self) -> None:
        waiters, self._waiters = self._waiters, set()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def wait(self, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiters.add(waiter)
        timer = loop.call_later(max(timeout, 0), _wake, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiters.discard(waiter)


class Gate:
    """Closed while a commit writes the log, opened by the commit's own thread.

    Waking a sleeping event loop is a wake-up of the process (~0.2 ms of CPU on these VMs): the
    opener wakes the loop only when a coroutine waits at the gate, which is seldom."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # the commit's thread and the loop's share the waiters
        self._closed = False
        self._waiters: list[asyncio.Future[None]] = []

    def close(self) -> None:
        with self._lock:
            self._closed = True

    def open(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Open; from another thread than the loop's, pass the loop to wake its waiters."""
        with self._lock:
            self._closed = False
            waiters, self._waiters = self._waiters, []
        if not waiters:
            return
        if loop is None:
            _release(waiters)
        else:
            loop.call_soon_threadsafe(_release, waiters)

    async def wait(self) -> None:
        with self._lock:
            if not self._closed:
                return
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
        await waiter


def _release(waiters: list[asyncio.Future[None]]) -> None:
    for waiter in waiters:
        _wake(waiter)


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


async def sleep_at_least(seconds: float) -> None:
    """Sleep no shorter than `seconds`, as mongod's sleeps: uvloop's timers count whole
    milliseconds and may fire up to one early (a fault's delay must not come up short)."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        await asyncio.sleep(left)
