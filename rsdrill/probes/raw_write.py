"""The raw write gap: writes through rsdrill's own connection layer, no driver in between.

The availability probe writes through pymongo, as an application does, so its gap includes
pymongo's own rediscovery: a server it marked Unknown is re-checked at most every
minHeartbeatFrequencyMS (500 ms, not configurable), which adds up to half a second to what the
server itself was down. This probe writes the same way every interval through
`rsdrill.connection.DirectConnection`, which reconnects at once and tries the members itself,
so its gap is the server's own, sampled at the probe interval (`raw_write_unavailable_s`).
An attempt (one per tick) is the insert on the member that took the last write or, when that
fails, on the first other member that takes it; nothing a primary refused is retried. A tick
within two intervals of the availability probe's last acknowledged write sends nothing: that write
already showed the server taking writes (the analyzer counts the write probe's successes as the
server's too), so on a healthy set this probe costs the cluster nothing and writes only while
pymongo's writes fail or stall. Measured
(bench/standalone_gap.py, a standalone restarted 10 s after a kill, probes every 20 ms): this
gap exceeds the server's own downtime by 4-29 ms, pymongo's by up to 0.35 s more.
"""

from __future__ import annotations

from typing import Any

from rsdrill.connection import ConnectOptions, DirectConnection, WireClientError
from rsdrill.history import History, RunClock
from rsdrill.probes.availability import PROBE_DB, WriteLoop
from rsdrill.probes.base import Probe

NAME = "raw_write"


class RawWriteLoop(Probe):
    """Inserts `{_id: seq}` every interval on the writable member, found by trying them.

    Load: one insert per interval on a kept socket while the member that took the last write
    still takes them. After a failure the tick tries the other members in turn (an insert on a
    member that is not primary is refused at once, as a `hello` would answer), those that
    answered last time first: a silently dead member costs its timeout only while no other
    member takes the write. While no member answers at all, ticks come every half interval.
    """

    name = NAME
    records_late_starts = True

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
        options: ConnectOptions,
        driver_writes: WriteLoop | None = None,
    ) -> None:
        super().__init__(history, clock, interval_s)
        self._driver_writes = driver_writes
        self._conns = {member: DirectConnection(member, timeout_s, options) for member in members}
        self._collection = collection
        self._write_concern: dict[str, Any] = {"w": w}
        if journal is not None:
            self._write_concern["j"] = journal
        self._writable: str | None = None
        self._unanswered: set[str] = set()
        self.seq = 0

    def tick(self) -> None:
        if self._driver_writes is not None:
            acked = self._driver_writes.last_acknowledged_s
            # Two intervals: the write loop's own jitter must not wake this probe.
            if acked is not None and self.clock.now() - acked < 2 * self.interval_s:
                return
        self.seq += 1
        t_start = self.clock.now()
        detail: dict[str, Any] = {"seq": self.seq}
        cmd = {"insert": self._collection, "documents": [{"_id": self.seq}],
               "writeConcern": self._write_concern}  # fmt: skip
        failed: tuple[str | None, str, dict[str, Any]] = (None, "error", {"error": "no member"})
        unreached = False  # whether `failed` is a member that did not answer
        for member in self._candidates():
            try:
                reply = self._conns[member].command(PROBE_DB, cmd)
            except WireClientError as exc:
                self._unanswered.add(member)
                if not unreached:  # the first member that did not answer
                    failed = (member, "timeout" if exc.timeout else "error", {"error": str(exc)})
                    unreached = True
                continue
            self._unanswered.discard(member)
            refusal = _refusal(reply)
            if reply.get("ok") != 1:  # not (or no longer) primary, shutting down: try the next
                if not unreached:  # a member that did not answer says more than a refusal
                    failed = (member, "error", refusal or {})
                continue
            # The primary: it took the write, or refused it (write or write concern error).
            self._writable = member
            outcome = "ok" if refusal is None else "error"
            self.record("insert", member, t_start, outcome, {**detail, **(refusal or {})})
            return
        self._writable = None
        last_member, outcome, why = failed
        self.record("insert", last_member, t_start, outcome, {**detail, **why})

    def next_wait_s(self) -> float:
        """Half the interval while no member answers at all (each down or silent): another try
        then costs no server anything, and the gap's end is found twice as precisely."""
        return self.interval_s / 2 if self._unanswered == set(self._conns) else self.interval_s

    def _candidates(self) -> list[str]:
        """The member that took the last write first, then those that answered, then the rest."""
        return sorted(self._conns, key=lambda m: (m != self._writable, m in self._unanswered))

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
