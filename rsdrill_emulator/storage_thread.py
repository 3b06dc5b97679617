"""The member's storage thread: commits (the log write and its fsync) run there, so that a slow
or stalled disk holds up what needs the database and not the heartbeats, as in mongod.

One long-lived thread that tells the event loop it is done through an eventfd the loop watches,
rather than `asyncio.to_thread`: the executor's futures, their chaining and the loop's
thread-safe call cost a commit ~40-60 us more CPU and ~50-60 us more latency on these VMs
(bench/storage_handoff.py: 0.69-0.77x of to_thread's CPU per commit). A member commits once per
write under a j:true or w:majority load, and a secondary once per batch."""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

_Job = tuple[Callable[[], Any], "asyncio.Future[Any]"]


class StorageThread:
    """Runs blocking calls one at a time, in order, off the event loop of `loop`."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        # Outcomes are handed back through a deque (appends and pops are atomic) and one
        # eventfd write per job: a loop that sleeps in epoll wakes once.
        self._done: deque[tuple[asyncio.Future[Any], Any, BaseException | None]] = deque()
        self._ready = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        loop.add_reader(self._ready, self._deliver)
        self.thread = threading.Thread(target=self._serve, name="storage", daemon=True)
        self.thread.start()

    def run(self, call: Callable[[], Any]) -> asyncio.Future[Any]:
        """`call()` on the storage thread; the future has its result or exception."""
        done: asyncio.Future[Any] = self.loop.create_future()
        self._jobs.put((call, done))
        return done

    def close(self) -> None:
        """End the thread once the calls queued before this are done (their waiters are not
        told): a member that moves to another event loop, as in-process tests do."""
        if not self.loop.is_closed():
            self.loop.remove_reader(self._ready)
        self._jobs.put(None)

    def _serve(self) -> None:
        # A daemon: the member leaves by os._exit, after its last commit.
        while (job := self._jobs.get()) is not None:
            call, done = job
            try:
                self._done.append((done, call(), None))
            except BaseException as exc:  # handed to the waiter, as an executor would
                self._done.append((done, None, exc))
            os.eventfd_write(self._ready, 1)
        os.close(self._ready)  # here, so that no call still running writes to a closed descriptor

    def _deliver(self) -> None:
        with contextlib.suppress(BlockingIOError):  # an earlier call took this job's count
            os.eventfd_read(self._ready)
        while self._done:
            done, result, error = self._done.popleft()
            if done.done():  # its waiter was cancelled
                continue
            if error is None:
                done.set_result(result)
            else:
                done.set_exception(error)
