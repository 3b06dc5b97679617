"""A member's wake-ups: loops and waiting commands sleep on a `Signal` until what they wait
for may have changed (positions, the commit point, the topology), or their timeout."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable


class Signal:
    """Wakes every waiter when something changed; waiters re-check their own condition.

    A future per waiter and a timer, not `wait_for` on an Event: that starts a task for each
    wait, and a write fires `progress` twice, each waking every loop that waits on it. A waiter
    that names what it waits for (`ready`) is woken only once that holds: eight writers waiting
    for w:majority were woken four times per write, each wake a resume of its whole command's
    coroutine chain, a new future and a new timer."""

    def __init__(self) -> None:
        self._waiters: dict[asyncio.Future[None], Callable[[], bool] | None] = {}

    def fire(self) -> None:
        waiters, self._waiters = self._waiters, {}
        for waiter, ready in waiters.items():
            if waiter.done():
                continue
            if ready is not None and not _holds(ready):
                self._waiters[waiter] = ready
                continue
            waiter.set_result(None)

    async def wait(self, timeout: float, ready: Callable[[], bool] | None = None) -> None:
        """Until a fire (one after which `ready()` holds, if given) or `timeout` seconds."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiters[waiter] = ready
        timer = loop.call_later(max(timeout, 0), _wake, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiters.pop(waiter, None)


def _holds(ready: Callable[[], bool]) -> bool:
    # Checked by whoever fires: a check that fails wakes its waiter, to fail in its own task.
    try:
        return ready()
    except Exception:
        return True


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
