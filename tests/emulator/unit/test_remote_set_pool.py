"""A router's pool of connections to a shard member (rsdrill_emulator/remote_set.py) across
the member's restart, against a real TCP server."""

from __future__ import annotations

import asyncio
import contextlib

from rsdrill_emulator.peer import PeerError
from rsdrill_emulator.remote_set import ReplicaSet
from tests.emulator.unit.test_peer_connection import _echo


class Member:
    """A server on one port that can be killed (its connections cut) and started again."""

    def __init__(self) -> None:
        self.port = 0
        self.server: asyncio.Server | None = None
        self.writers: list[asyncio.StreamWriter] = []

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        await _echo(reader, writer)

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = self.server.sockets[0].getsockname()[1]

    async def kill(self) -> None:
        assert self.server is not None
        self.server.close()
        for writer in self.writers:
            writer.close()
        self.writers.clear()
        await self.server.wait_closed()


async def _after_a_restart() -> list[str]:
    member = Member()
    await member.start()
    host = f"127.0.0.1:{member.port}"
    shard = ReplicaSet("shard0", [host])
    try:
        # Three commands at once leave three connections in the pool.
        await asyncio.gather(*(shard.run_on(host, "admin", {"ping": 1, "n": n, "delay": 0.1})
                               for n in range(3)))  # fmt: skip
        await member.kill()
        with contextlib.suppress(PeerError):  # as the router's next check of the member
            await shard.run_on(host, "admin", {"hello": 1, "n": 0}, 1)
        await member.start()
        # Then three commands at once (a check, a client's statement, ...): each has a
        # connection of its own.
        replies = await asyncio.gather(*(shard.run_on(host, "admin", {"ping": 1, "n": n}, 5)
                                         for n in range(3)), return_exceptions=True)  # fmt: skip
        return ["ok" if isinstance(r, dict) else type(r).__name__ for r in replies]
    finally:
        for conn in shard._idle[host]:
            conn.close()
        await member.kill()


def test_a_failure_drops_every_idle_connection_to_the_member() -> None:
    # As mongos's replica-set monitor drops a host's connections on a network error. Kept,
    # they failed the commands that met them after the member's restart: a transaction's
    # first statement through the router, once in CI.
    assert asyncio.run(_after_a_restart()) == ["ok", "ok", "ok"]
