"""The sandbox's sharded-cluster router (mongos): `python -m rsdrill_emulator --router`."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from pathlib import Path

from rsdrill_emulator.commands.base import CURRENT
from rsdrill_emulator.router import admin, crud  # noqa: F401 (their handlers register)
from rsdrill_emulator.router.balancer import balancer_loop
from rsdrill_emulator.router.migration import recovery_loop
from rsdrill_emulator.router.router import Router
from rsdrill_emulator.server import Server


async def run_router(directory: Path, host: str) -> None:
    # What it saw, to its log (routers/<port>/router.log): primaries found and lost.
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(name)s %(message)s")  # fmt: skip
    router = Router.open(directory, host)
    sets = [router.config, *router.shards.values()]
    for replica_set in sets:
        await replica_set.check()
    name, port = host.rsplit(":", 1)
    server = await Server(router).serve(name, int(port))
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stopping.set)
    tasks = [asyncio.create_task(s.monitor()) for s in sets]
    tasks.append(asyncio.create_task(router.catalog.refresh_loop()))
    tasks.append(asyncio.create_task(router.catalog.uptime_loop(host, CURRENT.version)))
    tasks.append(asyncio.create_task(recovery_loop(router)))
    tasks.append(asyncio.create_task(balancer_loop(router)))
    async with server:
        await stopping.wait()
    for task in tasks:
        task.cancel()


__all__ = ["Router", "run_router"]
