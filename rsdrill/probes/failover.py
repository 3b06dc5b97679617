"""Failover: every member asked `hello` directly, to see from the servers' side who is primary
and from when a new one accepts writes (a PRIMARY still draining says isWritablePrimary: false).

Each member is watched through an awaitable hello, as drivers' streaming monitors do: the probe
sends the member's last `topologyVersion` with `maxAwaitTimeMS`, and the member answers at once
when anything a hello shows changes, else after maxAwaitTimeMS. A member that is not changing
costs one operation per max_await instead of one per interval, and a change is still seen the
moment it happens. What the history can rely on:
- an awaited reply with the topologyVersion it was asked about ("changed": false) proves the
  member's state held over the whole request, `t_start` to `t_end`;
- a reply with a new topologyVersion ("changed": true) was pushed by the change: the member
  changed just before `t_end` (one network hop), and held its earlier state until then;
- a stream that breaks on a connection error (a killed process closes its sockets) held the
  earlier state until the break; one that times out (no answer within max_await + timeout: a
  frozen or unreachable member) proves nothing after its previous reply.
A member whose hello carries no topologyVersion (the legacy-handshake form, older servers) is
polled every interval, as is any member after an unanswered hello, until it answers again.
"""

from __future__ import annotations

from typing import Any

from rsdrill.connection import ConnectOptions, DirectConnection, WireClientError
from rsdrill.history import History, RunClock
from rsdrill.probes.base import Probe


class HelloStream(Probe):
    """One member's awaitable hello stream; each reply (or failure) is one "hello" op."""

    name = "failover"

    def __init__(
        self,
        history: History,
        clock: RunClock,
        *,
        member: str,
        interval_s: float,
        timeout_s: float,
        max_await_s: float,
        options: ConnectOptions,
    ) -> None:
        super().__init__(history, clock, interval_s)
        self.member = member
        self.max_await_s = max_await_s
        self._conn = DirectConnection(member, timeout_s, options)
        # The member's last topologyVersion; None until a hello answered with one.
        self._topology: dict[str, Any] | None = None
        self._writable = False
        # For pollers that need the member only when it changes (`recovery.StatusPoller`): a
        # count of the answers that may show a change (not an unchanged awaited one), and
        # whether the member is streaming with a healthy role (primary, secondary, arbiter).
        self.changes = 0
        self.steady = False
        # Replies in a row that came back within one interval: a server that does not hold
        # awaitable hellos answers every one at once, and is then polled, not hammered.
        self._quick = 0

    def tick(self) -> None:
        t_start = self.clock.now()
        asked = self._topology
        try:
            if asked is None:
                reply = self._conn.hello()
            else:
                reply = self._conn.awaited_hello(asked, self.max_await_s)
        except WireClientError as exc:
            if self.stopping:
                return  # cut short by stop(): nothing the member did
            detail: dict[str, Any] = {"error": str(exc)}
            if asked is not None:
                # A break, not a silence: the member held its state until its socket closed.
                detail.update(awaited=True, held_writable=self._writable and not exc.timeout)
            self._topology = None
            self._writable = False
            self.steady = False
            self.changes += 1
            self.record("hello", self.member, t_start, "timeout" if exc.timeout else "error",
                        detail)  # fmt: skip
            return
        writable = bool(reply.get("isWritablePrimary"))
        detail = {
            "writable": writable,
            "secondary": bool(reply.get("secondary")),
            "primary": reply.get("primary"),
            "arbiter": bool(reply.get("arbiterOnly")),
        }
        if writable and reply.get("electionId") is not None:
            detail["election_id"] = str(reply["electionId"])  # one per term (invariants.py)
            detail["set"] = reply.get("setName")  # each set has its own terms (sharded)
        topology = reply.get("topologyVersion")
        if asked is not None:
            # Changed or not, the earlier state held until the reply was sent.
            detail.update(awaited=True, changed=topology != asked, held_writable=self._writable)
        self._topology = topology if isinstance(topology, dict) else None
        self._writable = writable
        self._quick = self._quick + 1 if self.clock.now() - t_start < self.interval_s else 0
        if asked is None or topology != asked:
            self.changes += 1
        self.steady = self._topology is not None and (
            writable or detail["secondary"] or detail["arbiter"]
        )
        self.record("hello", self.member, t_start, "ok", detail)

    def next_wait_s(self) -> float:
        """At once while the member streams (the server does the waiting), else the interval;
        the interval too after two replies in a row that came back within it."""
        return 0.0 if self._topology is not None and self._quick < 2 else self.interval_s

    def stop(self) -> None:
        """Stop now: an awaited hello in flight is cut, not waited on (a quiet member holds it
        max_await, and the run's analysis would wait for it)."""
        super().stop()
        self._conn.interrupt()

    def close(self) -> None:
        self._conn.close()
