"""A fetch's entries are applied only where they follow: on the position the fetch asked from.
The soak's finding (seed 2, run 39): a member whose fetch was held up by a partition was
elected, wrote in its term, was deposed, and then received the old fetch's reply, entries of
the next term that followed its older position; applied on top of its own writes, those writes
were never rolled back and the member diverged. The rule alone, on a stand-in member; the soak
judges it on real members."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from bson.int64 import Int64
from bson.timestamp import Timestamp

from rsdrill_emulator.node import MemberState
from rsdrill_emulator.oplog import OpTime
from rsdrill_emulator.sync import fetch_once


class _Member:
    """What `fetch_once` reads and calls of a member; its oplog is a list of optimes."""

    def __init__(self, *, writes_meanwhile: bool) -> None:
        self.host = "127.0.0.1:1"
        self.term = 1
        self.state = MemberState.SECONDARY
        self.oplog = [OpTime(1, 100, 1)]
        self.last_durable = self.oplog[-1]
        self.last_applied_wall = None
        self.spec = SimpleNamespace(settings=SimpleNamespace(election_timeout_ms=1000))
        self.peer_calls = SimpleNamespace(call=self._call)
        self.writes_meanwhile = writes_meanwhile
        self.replication_stopped = False

    @property
    def last_applied(self) -> OpTime:
        return self.oplog[-1]

    async def _call(self, source: str, request: dict[str, Any], **_: Any) -> dict[str, Any]:
        assert request["after"] == OpTime(1, 100, 1).document()
        if self.writes_meanwhile:  # elected, wrote in term 2, deposed: all before the reply
            self.oplog.append(OpTime(2, 101, 1))
        entry = {"ts": Timestamp(102, 1), "t": Int64(3), "op": "n", "ns": "", "o": {}}
        return {"ok": 1.0, "term": Int64(3), "entries": [entry]}

    def observe_term(self, term: int, source: str) -> bool:
        self.term = max(self.term, term)
        return True

    async def storage_idle(self) -> None:
        return None

    def apply_replicated(self, entry: dict[str, Any]) -> None:
        self.oplog.append(OpTime.of(entry))

    async def flush(self) -> None:
        return None


@pytest.mark.parametrize("moved", [False, True])
def test_entries_are_applied_only_on_the_position_they_were_asked_from(moved: bool) -> None:
    member = _Member(writes_meanwhile=moved)
    asyncio.run(fetch_once(member, "127.0.0.1:2", 0.1))  # type: ignore[arg-type]
    if moved:  # left for the next fetch, which asks from (2, 101, 1): the source's divergence
        assert member.oplog == [OpTime(1, 100, 1), OpTime(2, 101, 1)]
    else:
        assert member.oplog == [OpTime(1, 100, 1), OpTime(3, 102, 1)]
