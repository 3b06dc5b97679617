"""The member's storage thread: commits off the event loop, answered through the loop."""

from __future__ import annotations

import asyncio
import os
import threading
import time

import pytest
import uvloop

from rsdrill_emulator.storage_thread import StorageThread


def test_calls_run_in_order_on_one_other_thread_with_their_results_and_errors() -> None:
    async def main() -> None:
        storage = StorageThread(asyncio.get_running_loop())
        seen: list[tuple[int, int]] = []

        def job(n: int) -> int:
            seen.append((n, threading.get_ident()))
            return n * n

        def broken() -> None:
            raise OSError("disk I/O error")

        futures = [storage.run(lambda n=n: job(n)) for n in range(20)]
        failed = storage.run(broken)
        assert await asyncio.gather(*futures) == [n * n for n in range(20)]
        with pytest.raises(OSError, match="disk I/O error"):
            await failed
        assert [n for n, _ in seen] == list(range(20))
        threads = {ident for _, ident in seen}
        assert len(threads) == 1 and threading.get_ident() not in threads

    uvloop.run(main())


def test_a_stalled_call_holds_up_its_waiter_only_and_the_loop_goes_on() -> None:
    """A stalled disk: heartbeats (here a ticking coroutine) are still served meanwhile."""

    async def main() -> None:
        storage = StorageThread(asyncio.get_running_loop())
        release = threading.Event()
        stalled = storage.run(lambda: release.wait(10))
        ticks = 0
        started = time.monotonic()
        while time.monotonic() - started < 0.3:
            await asyncio.sleep(0.01)
            ticks += 1
        assert not stalled.done()
        assert ticks >= 10  # ~30 at rest: the loop was not held
        release.set()
        assert await asyncio.wait_for(stalled, 5) is True

    uvloop.run(main())


def test_a_cancelled_waiter_does_not_stop_the_calls_after_it() -> None:
    async def main() -> None:
        storage = StorageThread(asyncio.get_running_loop())
        release = threading.Event()
        done: list[str] = []

        def first() -> None:
            release.wait(10)
            done.append("first")

        waiter = asyncio.ensure_future(storage.run(first))
        second = storage.run(lambda: done.append("second"))
        await asyncio.sleep(0.05)
        waiter.cancel()
        release.set()
        await asyncio.wait_for(second, 5)
        assert done == ["first", "second"]  # the cancelled one still ran, in its turn

    uvloop.run(main())


def test_a_closed_storage_thread_ends_after_the_calls_queued_and_gives_back_its_eventfd() -> None:
    """A member moved to another event loop (in-process tests) leaves no thread or descriptor."""

    async def main() -> None:
        storage = StorageThread(asyncio.get_running_loop())
        assert await storage.run(lambda: 7) == 7
        queued: list[int] = []
        storage.run(lambda: time.sleep(0.05) or queued.append(1))
        storage.close()
        storage.thread.join(5)
        assert not storage.thread.is_alive()
        assert queued == [1]  # the call queued before close() ran first
        with pytest.raises(OSError):  # closed by the thread, nothing opened since
            os.fstat(storage._ready)

    uvloop.run(main())
