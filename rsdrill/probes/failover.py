"""Failover: every member asked `hello` directly, to see from the servers' side who is primary
and from when a new one accepts writes (a PRIMARY still draining says isWritablePrimary: false)."""

from __future__ import annotations

from typing import Any

from rsdrill.connection import DirectConnection
from rsdrill.probes.base import MemberPoller


class HelloPoller(MemberPoller):
    name = "failover"
    op = "hello"

    def ask(self, conn: DirectConnection) -> dict[str, Any]:
        return conn.hello()

    def answered(self, t_start: float, reply: dict[str, Any]) -> None:
        self.record(
            "hello",
            self.member,
            t_start,
            "ok",
            {
                "writable": bool(reply.get("isWritablePrimary")),
                "secondary": bool(reply.get("secondary")),
                "primary": reply.get("primary"),
                "arbiter": bool(reply.get("arbiterOnly")),
            },
        )
