"""A router's retried command (rsdrill_emulator/remote_set.py) across a failover, against real
TCP servers: the command held on the primary for longer than a primary wait, that primary
then killed, another member elected."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from rsdrill import wire
from rsdrill_emulator.errors import CommandError
from rsdrill_emulator.remote_set import ReplicaSet


class Member:
    """A server that answers hello as a primary or not, and any other command at once or,
    while `holding`, never (until killed)."""

    def __init__(self, *, primary: bool, holding: bool) -> None:
        self.primary = primary
        self.holding = holding
        self.server: asyncio.Server | None = None
        self.writers: list[asyncio.StreamWriter] = []

    @property
    def host(self) -> str:
        assert self.server is not None
        return f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                request_id, _, _, payload = await wire.read_frame(reader)
                body = wire.parse_op_msg(request_id, payload).body
                reply: dict[str, Any] = {"ok": 1.0}
                if "hello" in body:
                    reply["isWritablePrimary"] = self.primary
                elif self.holding:
                    await asyncio.Event().wait()
                writer.write(wire.encode_op_msg(1, request_id, reply))
                await writer.drain()

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)

    def kill(self) -> None:
        assert self.server is not None
        self.server.close()
        for writer in self.writers:
            writer.close()


async def _failover_after_a_hold(*, retry: bool, wait_s: float = 1.5) -> str:
    old = Member(primary=True, holding=True)
    new = Member(primary=False, holding=False)
    await old.start()
    await new.start()
    shard = ReplicaSet("shard0", [old.host, new.host])
    monitor = asyncio.ensure_future(shard.monitor())
    try:
        await shard.check()
        sent = asyncio.ensure_future(shard.on_primary("admin", {"commit": 1}, retry=retry,
                                                      wait_s=wait_s))  # fmt: skip
        await asyncio.sleep(wait_s + 0.5)  # held for longer than a primary wait
        old.kill()
        await asyncio.sleep(0.2)  # a moment without a primary, as an election
        new.primary = True
        host, _ = await asyncio.wait_for(sent, 10)
        return "new primary" if host == new.host else host
    finally:
        monitor.cancel()
        new.kill()


def test_a_retried_command_waits_afresh_for_the_next_primary() -> None:
    # As mongos's next attempt: once the first wait is over (spent while the command was
    # held), a retry has a wait of its own; it had none (a commit held on its coordinator,
    # which then died, failed at once).
    assert asyncio.run(_failover_after_a_hold(retry=True)) == "new primary"


def test_a_command_not_retried_fails_with_its_primary() -> None:
    with pytest.raises(CommandError) as failed:
        asyncio.run(_failover_after_a_hold(retry=False))
    assert failed.value.code == 6
