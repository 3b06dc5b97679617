"""Failover: every member asked `hello` directly, to see from the servers' side who is primary
and from when a new one accepts writes (a PRIMARY still draining says isWritablePrimary: false)."""

from __future__ import annotations

from rsdrill.probes.base import Probe
from rsdrill.probes.history import History, RunClock
from rsdrill.probes.wireclient import DirectConnection, WireClientError


class HelloPoller(Probe):
    name = "failover"

    def __init__(
        self, history: History, clock: RunClock, *, member: str, interval_s: float, timeout_s: float
    ) -> None:
        super().__init__(history, clock, interval_s)
        self.member = member
        self._conn = DirectConnection(member, timeout_s)

    def tick(self) -> None:
        t_start = self.clock.now()
        try:
            reply = self._conn.command("admin", {"hello": 1})
        except WireClientError as exc:
            outcome = "timeout" if exc.timeout else "error"
            self.record("hello", self.member, t_start, outcome, {"error": str(exc)})
            return
        self.record(
            "hello",
            self.member,
            t_start,
            "ok",
            {
                "writable": bool(reply.get("isWritablePrimary", reply.get("ismaster"))),
                "secondary": bool(reply.get("secondary")),
                "primary": reply.get("primary"),
                "arbiter": bool(reply.get("arbiterOnly")),
            },
        )

    def close(self) -> None:
        self._conn.close()
