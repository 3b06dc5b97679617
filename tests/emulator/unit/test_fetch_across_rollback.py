"""A long-polled oplog fetch must not outlive a rollback of its source. The soak's finding
(correct sandbox, seed 2329773211 under load): a secondary long-polled a member for what follows
the member's term-5 entries; the member rolled those back, took the new primary's term-6
entries, and answered the waiting fetch with them. The secondary applied them on top of an entry
nobody else had, so it never rolled back, and kept a write (never acknowledged) that the others
lacked. Here on a real member, in process: the rollback happens while the fetch waits."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from bson.timestamp import Timestamp

from rsdrill.sandbox.config import build_topology
from rsdrill_emulator.node import MemberState, Node
from rsdrill_emulator.oplog import OpTime, make_entry
from rsdrill_emulator.sync import DIVERGENT, handle_get_oplog


def _source(tmp_path: Path) -> Node:
    spec = build_topology("rs3", port_base=27100)
    node = Node(spec, spec.members[0].host, tmp_path)
    node.boot(initiate=True)
    return node


def test_a_fetch_waiting_on_a_source_that_rolls_back_gets_no_entries_of_the_new_branch(
    tmp_path: Path,
) -> None:
    async def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
        node = _source(tmp_path)
        kept = make_entry("i", "db.c", {"_id": 22}, ts=Timestamp(100, 1), term=1)
        undone = make_entry("i", "db.c", {"_id": 23}, ts=Timestamp(100, 2), term=1)
        node.apply_replicated(kept)
        node.apply_replicated(undone)
        ask = {"rsdrillGetOplog": 1, "after": OpTime.of(undone).document(), "maxWaitMS": 2000}
        waiting = asyncio.ensure_future(handle_get_oplog(node, ask))
        await asyncio.sleep(0.05)
        # What sync.rollback does meanwhile: back to the common point, then the new branch.
        node.set_state(MemberState.ROLLBACK)
        node.oplog.truncate_after(OpTime.of(kept))
        node.set_state(MemberState.RECOVERING)
        node.apply_replicated(make_entry("n", "", {"msg": "x"}, ts=Timestamp(101, 1), term=2))
        node.set_state(MemberState.SECONDARY)
        reply = await waiting
        # Asked again, it says the asker diverged: the asker rolls back.
        again = await handle_get_oplog(node, {**ask, "maxWaitMS": 0})
        return reply, again

    reply, again = asyncio.run(scenario())
    assert reply["ok"] == 0.0 and not reply.get("entries"), reply
    assert again.get("codeName") == DIVERGENT, again
