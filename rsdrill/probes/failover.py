"""Failover: every member asked `hello` directly, to see from the servers' side who is primary
and from when a new one accepts writes (a PRIMARY still draining says isWritablePrimary: false)."""

from __future__ import annotations

from typing import Any

from rsdrill.probes.base import MemberPoller


class HelloPoller(MemberPoller):
    name = "failover"
    op = "hello"
    command = {"hello": 1}

    def answered(self, t_start: float, reply: dict[str, Any]) -> None:
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
