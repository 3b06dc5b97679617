"""Replication lag: the primary's view of how far each healthy secondary's applied writes trail
its own, from replSetGetStatus wall times (millisecond resolution; optimeDate has only seconds)."""

from __future__ import annotations

import datetime as dt

from rsdrill.connection import ConnectOptions, DirectConnection, WireClientError
from rsdrill.history import History, RunClock
from rsdrill.probes.base import Probe


class LagPoller(Probe):
    name = "lag"

    def __init__(
        self,
        history: History,
        clock: RunClock,
        *,
        members: list[str],
        interval_s: float,
        timeout_s: float,
        options: ConnectOptions,
    ) -> None:
        super().__init__(history, clock, interval_s)
        self._conns = [DirectConnection(m, timeout_s, options) for m in members]

    def tick(self) -> None:
        for conn in self._conns:
            t_start = self.clock.now()
            try:
                status = conn.command("admin", {"replSetGetStatus": 1})
            except WireClientError as exc:
                # Recorded, not skipped: a member that cannot be asked shows in the history.
                outcome = "timeout" if exc.timeout else "error"
                self.record("status", conn.host, t_start, outcome, {"error": str(exc)})
                continue
            if status.get("myState") != 1:
                continue
            members = status.get("members", [])
            primary = next((m for m in members if m.get("self")), None)
            if primary is None or not isinstance(primary.get("lastAppliedWallTime"), dt.datetime):
                return
            lags = {
                m["name"]: max(
                    (primary["lastAppliedWallTime"] - m["lastAppliedWallTime"]).total_seconds(), 0.0
                )
                for m in members
                if m.get("stateStr") == "SECONDARY"
                and m.get("health")
                and isinstance(m.get("lastAppliedWallTime"), dt.datetime)
            }
            self.record("status", conn.host, t_start, "ok", {"lag_s": lags})
            return

    def close(self) -> None:
        for conn in self._conns:
            conn.close()
