"""The raw write gap: writes through rsdrill's own connection layer, no driver in between.

The availability probe writes through pymongo, as an application does, so its gap includes
pymongo's own rediscovery: a server it marked Unknown is re-checked at most every
minHeartbeatFrequencyMS (500 ms, not configurable), which adds up to half a second to what the
server itself was down. This probe writes the same way every interval through
`rsdrill.connection.DirectConnection`, which reconnects at once and asks the members' `hello`
itself, so its gap is the server's own, sampled at the probe interval (`raw_write_unavailable_s`).
No retries: an attempt is one insert on the member last known to be writable. Measured
(bench/standalone_gap.py, a standalone restarted 10 s after a kill, probes every 20 ms): this
gap exceeds the server's own downtime by 8-28 ms, pymongo's by 0.23-0.36 s more.
"""

from __future__ import annotations

from typing import Any

from rsdrill.connection import DirectConnection, WireClientError
from rsdrill.probes.availability import PROBE_DB
from rsdrill.probes.base import Probe
from rsdrill.probes.history import History, RunClock

NAME = "raw_write"


class RawWriteLoop(Probe):
    """Inserts `{_id: seq}` every interval on the writable member, found by asking `hello`.

    Load: one insert per interval on a kept socket; `hello` only after a failed attempt, to
    the members that answered last time first (a member that did not answer is asked last, so
    a silently dead one costs its timeout only while no other member is writable).
    """

    name = NAME

    def __init__(
        self,
        history: History,
        clock: RunClock,
        *,
        members: list[str],
        collection: str,
        interval_s: float,
        timeout_s: float,
        w: int | str,
        journal: bool | None,
    ) -> None:
        super().__init__(history, clock, interval_s)
        self._conns = {member: DirectConnection(member, timeout_s) for member in members}
        self._collection = collection
        self._write_concern: dict[str, Any] = {"w": w}
        if journal is not None:
            self._write_concern["j"] = journal
        self._writable: str | None = None
        self._unanswered: set[str] = set()
        self.seq = 0

    def tick(self) -> None:
        self.seq += 1
        t_start = self.clock.now()
        detail: dict[str, Any] = {"seq": self.seq}
        member = self._writable or self._find_writable(detail)
        if member is None:
            self.record("insert", None, t_start, "error", detail)
            return
        cmd = {"insert": self._collection, "documents": [{"_id": self.seq}],
               "writeConcern": self._write_concern}  # fmt: skip
        try:
            reply = self._conns[member].command(PROBE_DB, cmd)
        except WireClientError as exc:
            self._writable = None
            self._unanswered.add(member)
            outcome = "timeout" if exc.timeout else "error"
            self.record("insert", member, t_start, outcome, {**detail, "error": str(exc)})
            return
        refusal = _refusal(reply)
        if refusal is None:
            self.record("insert", member, t_start, "ok", detail)
            return
        if reply.get("ok") != 1:  # not primary (any more), shutting down, ...: ask again
            self._writable = None
        self.record("insert", member, t_start, "error", {**detail, **refusal})

    def _find_writable(self, detail: dict[str, Any]) -> str | None:
        """The member whose hello says it takes writes; None (and why, in `detail`) if none."""
        order = sorted(self._conns, key=lambda m: m in self._unanswered)
        for member in order:
            try:
                hello = self._conns[member].hello()
            except WireClientError as exc:
                self._unanswered.add(member)
                detail["error"] = str(exc)
                continue
            self._unanswered.discard(member)
            if hello.get("isWritablePrimary") is True:
                self._writable = member
                return member
        detail.setdefault("error", "no member is a writable primary")
        return None

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()


def _refusal(reply: dict[str, Any]) -> dict[str, Any] | None:
    """None for an acknowledged insert; else the error as the history records it."""
    if reply.get("ok") != 1:
        return {"error": str(reply.get("errmsg", "refused"))[:300], "code": reply.get("code")}
    problems = reply.get("writeErrors") or []
    if reply.get("writeConcernError"):
        problems = [*problems, reply["writeConcernError"]]
    if problems or reply.get("n") != 1:
        first = problems[0] if problems else {"errmsg": f"n = {reply.get('n')}"}
        return {"error": str(first.get("errmsg", "write error"))[:300], "code": first.get("code")}
    return None
