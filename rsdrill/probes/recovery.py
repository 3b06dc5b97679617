"""Recovery: replSetGetStatus on every member directly; each member's own state over time, and
the new primary's election dates (when it called the election, started its term, and became
writable by majority) for the failover decomposition."""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

from rsdrill.connection import COMMAND_NOT_FOUND, ConnectOptions, WireClientError
from rsdrill.history import History, RunClock
from rsdrill.probes.base import MemberPoller
from rsdrill.probes.failover import HelloStream
from rsdrill.states import NO_REPLICATION_ENABLED, STANDALONE, hello_state, own_state

_ELECTION_DATES = {
    "called_s": "lastElectionDate",
    "new_term_s": "newTermStartDate",
    "majority_writable_s": "wMajorityWriteAvailabilityDate",
}


# While the member's hello stream shows it healthy and unchanged, one poll per this many
# intervals: enough for the terms the failover decomposition compares against.
QUIET_INTERVALS = 10


class StatusPoller(MemberPoller):
    """replSetGetStatus every interval; with the member's hello stream (`watch`), only while
    the stream shows it changing, unhealthy or not streaming, and every QUIET_INTERVALS
    intervals otherwise: a change is on the stream at once, so a state is still seen within one
    interval of it, and a healthy member that is not changing costs a tenth."""

    name = "recovery"
    op = "status"
    command = {"replSetGetStatus": 1}

    def __init__(
        self,
        history: History,
        clock: RunClock,
        *,
        member: str,
        interval_s: float,
        timeout_s: float,
        options: ConnectOptions,
        watch: HelloStream | None = None,
    ) -> None:
        super().__init__(history, clock, member=member, interval_s=interval_s, timeout_s=timeout_s,
                         options=options)  # fmt: skip
        self._watch = watch
        self._seen_changes = -1
        self._asked_at = -math.inf

    def tick(self) -> None:
        watch, now = self._watch, self.clock.now()
        if watch is not None:
            quiet = watch.steady and watch.changes == self._seen_changes
            if quiet and now - self._asked_at < QUIET_INTERVALS * self.interval_s:
                return
            self._seen_changes = watch.changes  # read before asking: a change meanwhile counts
        self._asked_at = now
        super().tick()

    def answered(self, t_start: float, status: dict[str, Any]) -> None:
        if status.get("code") == NO_REPLICATION_ENABLED:  # it answers, and has no replica set
            self.record("status", self.member, t_start, "ok", {"state": STANDALONE})
            return
        if status.get("code") == COMMAND_NOT_FOUND:  # a compatible server: its hello says
            self._hello_only(t_start)
            return
        if not status.get("ok"):
            self.record(
                "status",
                self.member,
                t_start,
                "error",
                {"error": status.get("errmsg", ""), "code": status.get("code")},
            )
            return
        self.record("status", self.member, t_start, "ok", self._detail(status))

    def _hello_only(self, t_start: float) -> None:
        try:
            hello = self._conn.hello()
        except WireClientError as exc:
            self.unanswered(t_start, exc)
            return
        self.record("status", self.member, t_start, "ok", {"state": hello_state(hello)})

    def _detail(self, status: dict[str, Any]) -> dict[str, Any]:
        me: dict[str, Any] = next((m for m in status.get("members", []) if m.get("self")), {})
        detail: dict[str, Any] = {
            "state": own_state(status) or "UNKNOWN",
            "term": int(status.get("term", -1)),
        }
        if me.get("infoMessage"):  # e.g. why it is RECOVERING ("too stale to catch up")
            detail["message"] = str(me["infoMessage"])
        if status.get("tooStale"):  # MongoDB 4.2+: fell off its sync sources' oplogs
            detail["too_stale"] = True
        metrics = status.get("electionCandidateMetrics")
        if me.get("stateStr") == "PRIMARY" and metrics:
            election: dict[str, Any] = {"term": int(metrics.get("electionTerm", status["term"]))}
            for key, field in _ELECTION_DATES.items():
                value = metrics.get(field)
                election[key] = (
                    self.clock.from_wall(value.replace(tzinfo=dt.UTC).timestamp())
                    if isinstance(value, dt.datetime)
                    else None
                )
            detail["election"] = election
        return detail
