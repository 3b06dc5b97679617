"""One replica set seen from outside (a router's view of a shard or of the config servers, a
transaction coordinator's of another shard): which member is its primary, found by hello as
mongos's replica-set monitor does (a check every half second, and at once when a command meets
a NotPrimary error or a closed connection), and a small pool of connections per member,
closed all at once when one of them fails."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from rsdrill_emulator.errors import NOT_PRIMARY_CODES, CommandError
from rsdrill_emulator.peer import PeerConnection, PeerError

_log = logging.getLogger(__name__)

CHECK_INTERVAL_S = 0.5
HELLO_TIMEOUT_S = 1.0
CHECK_BOUND_S = 5 * HELLO_TIMEOUT_S  # its hellos run at once, each within HELLO_TIMEOUT_S
COMMAND_TIMEOUT_S = 30.0
PRIMARY_WAIT_S = 15.0
"""How long a command waits for its set to have a primary (mongos: its server selection
timeout, 15 s by default for the replica-set monitor's `FindHostTimeout`)."""
RETRIES = 3
"""How often a retried command is sent again once its first wait is over, each time with a
wait of its own (mongos's `kOnErrorNumRetries`)."""


class SetUnavailable(CommandError):
    def __init__(self, name: str, why: str) -> None:
        super().__init__(133, f"could not find a primary of {name}: {why}")


class ReplicaSet:
    """One replica set's members, its primary as last seen, and connections to each."""

    def __init__(self, name: str, hosts: list[str]) -> None:
        self.name = name
        self.hosts = list(hosts)
        self.primary: str | None = None
        self._idle: dict[str, list[PeerConnection]] = {h: [] for h in hosts}
        self._changed = asyncio.Event()
        self._check_now = asyncio.Event()

    @contextlib.asynccontextmanager
    async def connection(self, host: str) -> AsyncIterator[PeerConnection]:
        idle = self._idle.setdefault(host, [])
        conn = idle.pop() if idle else PeerConnection(host)
        try:
            yield conn
        finally:
            if len(idle) < 8:
                idle.append(conn)
            else:
                conn.close()

    async def run_on(self, host: str, db: str, cmd: dict[str, Any],
                     timeout: float = COMMAND_TIMEOUT_S) -> dict[str, Any]:  # fmt: skip
        async with self.connection(host) as conn:
            try:
                return await conn.command(db, cmd, timeout)
            except PeerError:
                # As mongos's replica-set monitor on a network error: every idle connection
                # to the host goes too (after a restart, each would fail its next command).
                for idle in self._idle.get(host, []):
                    idle.close()
                raise

    async def monitor(self) -> None:
        """Check every member's hello every CHECK_INTERVAL_S, or at once when asked. As
        mongos's monitor it never stops: a check that fails or hangs is logged and made again
        (a stopped one left the router without the set's primary until its restart)."""
        while True:
            try:
                await asyncio.wait_for(self.check(), CHECK_BOUND_S)
            except Exception:
                _log.exception("%s: a check of its members failed", self.name)
            self._check_now.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._check_now.wait(), CHECK_INTERVAL_S)

    async def check(self) -> None:
        replies = await asyncio.gather(*(self._hello(h) for h in self.hosts))
        primaries = [(r.get("electionId"), h) for h, r in zip(self.hosts, replies, strict=True)
                     if r.get("isWritablePrimary")]  # fmt: skip
        # Two members may both claim it for a moment: the newer election wins.
        primary = max(primaries, key=lambda p: p[0].binary if p[0] else b"")[1] if primaries \
            else None  # fmt: skip
        if primary != self.primary:
            unanswered = [f"{h}: {r['error']}" for h, r in zip(self.hosts, replies, strict=True)
                          if "error" in r]  # fmt: skip
            _log.info("%s: primary %s -> %s%s", self.name, self.primary, primary,
                      f" ({'; '.join(unanswered)})" if unanswered else "")  # fmt: skip
            self.primary = primary
            self._changed.set()
            self._changed = asyncio.Event()

    async def _hello(self, host: str) -> dict[str, Any]:
        try:
            return await self.run_on(host, "admin", {"hello": 1}, HELLO_TIMEOUT_S)
        except PeerError as exc:
            return {"error": str(exc) or type(exc).__name__}

    def suspect(self, host: str) -> None:
        """A command on `host` met a NotPrimary error or a dead connection: forget it as the
        primary and check again now."""
        if self.primary == host:
            _log.info("%s: primary %s -> None (a command on it failed)", self.name, host)
            self.primary = None
        self._check_now.set()

    async def wait_primary(self, deadline: float) -> str:
        while self.primary is None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise SetUnavailable(self.name, "none was found in time")
            self._check_now.set()
            changed = self._changed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), min(left, CHECK_INTERVAL_S))
        return self.primary

    async def on_primary(
        self, db: str, cmd: dict[str, Any], *, retry: bool, wait_s: float = PRIMARY_WAIT_S
    ) -> tuple[str, dict[str, Any]]:
        """Run `cmd` on the primary; returns the member that answered and its reply. With
        `retry` (a retryable write or a read), a NotPrimary error or a lost connection is
        retried on the next primary found within `wait_s`, as mongos retries them, and after
        that up to RETRIES times more, each with a whole wait of its own (a commit held for
        seconds on a coordinator that then died has the next primary's election to wait
        for, as mongos's next attempt has); otherwise the error is the client's."""
        deadline = time.monotonic() + wait_s
        late = RETRIES

        def again() -> bool:
            nonlocal deadline, late
            if not retry:
                return False
            if time.monotonic() < deadline:
                return True
            if not late:
                return False
            late -= 1
            deadline = time.monotonic() + wait_s
            return True

        while True:
            host = await self.wait_primary(deadline)
            try:
                reply = await self.run_on(host, db, cmd)
            except PeerError as exc:
                self.suspect(host)
                if not again():
                    raise CommandError(
                        6,
                        f"{self.name} ({host}): {exc}",
                        labels=("RetryableWriteError",) if retry else (),
                    ) from None
                continue
            code = reply.get("code") if not reply.get("ok") else None
            wc_code = (reply.get("writeConcernError") or {}).get("code")
            if code in NOT_PRIMARY_CODES or wc_code in NOT_PRIMARY_CODES:
                self.suspect(host)
                if code in NOT_PRIMARY_CODES and again():
                    continue
            return host, reply
