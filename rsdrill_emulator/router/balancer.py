"""The balancer: one router at a time (the `balancer` lease in config.locks) moves a chunk of a
collection from the shard with the most of its chunks to the one with the fewest, once they
differ by MongoDB's migration threshold, by the chunk-count policy MongoDB used before 6.0.3
(2 below 20 chunks, 4 below 80, 8 from there; 6.0.3 and later balance by data size, which a
sandbox's small collections would never trigger). One migration per round; a round every
10 s, 1 s after one that moved a chunk, as MongoDB's; none while the balancer is stopped
(config.settings) or for a collection with noBalance."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from rsdrill_emulator.errors import CommandError
from rsdrill_emulator.router.migration import move_chunk
from rsdrill_emulator.router.router import Router
from rsdrill_emulator.router.routing import Chunk, CollectionRoute

_log = logging.getLogger(__name__)

ROUND_S = 10.0
BUSY_ROUND_S = 1.0
LEASE = "balancer"


async def balancer_loop(router: Router) -> None:
    delay = ROUND_S
    while True:
        await asyncio.sleep(delay)
        moved = False
        with contextlib.suppress(CommandError):  # the config servers are away: next round
            moved = await balance_round(router)
        delay = BUSY_ROUND_S if moved else ROUND_S


async def balance_round(router: Router) -> bool:
    """One round, if this router holds the lease; whether it moved a chunk."""
    catalog = router.catalog
    if await catalog.balancer_stopped():
        return False
    if not await catalog.take_lease(LEASE, router.host, 3 * ROUND_S):
        return False
    table = await catalog.refresh()
    for route in list(table.collections.values()):
        move = chunk_to_move(route, sorted(table.shards))
        if route.no_balance or move is None:
            continue
        chunk, recipient = move
        await catalog.mark_round(LEASE, router.host, moving=True)
        try:
            await move_chunk(router, route.ns, chunk.min, recipient)
        except CommandError as exc:
            _log.info("balancer: moving a chunk of %s to %s failed (%s)", route.ns, recipient,
                      exc)  # fmt: skip
            continue
        finally:
            with contextlib.suppress(CommandError):  # else the lease's expiry ends the round
                await catalog.mark_round(LEASE, router.host, moving=False)
        _log.info("balancer: moved %s %s from %s to %s", route.ns, chunk.min, chunk.shard,
                  recipient)  # fmt: skip
        return True
    return False


def threshold(chunks: int) -> int:
    """How far apart two shards' chunk counts may be before a chunk moves."""
    return 2 if chunks < 20 else 4 if chunks < 80 else 8


def chunk_to_move(route: CollectionRoute, shards: list[str]) -> tuple[Chunk, str] | None:
    """The chunk to move and its recipient: the first chunk of the shard with the most, to
    the shard with the fewest (the first by name among equals); None when balanced."""
    if not shards:
        return None
    counts = dict.fromkeys(shards, 0)
    for chunk in route.chunks:
        counts[chunk.shard] = counts.get(chunk.shard, 0) + 1
    most = max(counts, key=lambda s: (counts[s], s))
    fewest = min(counts, key=lambda s: (counts[s], s))
    if counts[most] - counts[fewest] < threshold(len(route.chunks)):
        return None
    return next(c for c in route.chunks if c.shard == most), fewest
