"""The member's wall clock, which the `clock-skew` fault moves (a control command only rsdrill
sends: `{rsdrillClockSkew: <offset seconds>, drift: <seconds per second>}` on admin).

What reads it is what a skewed host's mongod reads from its clock: `localTime` in hello and
serverStatus, `date` in replSetGetStatus, the oplog's `wall` and the seconds of new oplog
timestamps (so `$clusterTime` and `operationTime`, which come from them), heartbeat times and
`electionCandidateMetrics` dates. Elections, heartbeats and timeouts run on the monotonic clock,
as mongod's do, so a skew alone starts no election. Timestamps never go back: once a member
wrote ahead, its next ones stay ahead until the clock catches up (`TimestampClock`). The
members' event logs (rsdrill's ground truth) keep the real time.
"""

from __future__ import annotations

import datetime as dt
import time

_offset_s = 0.0
_drift = 0.0  # added seconds per elapsed second
_since_mono = time.monotonic()


def set_skew(offset_s: float, drift: float = 0.0) -> None:
    """From now on the clock reads real time + offset_s + drift * (time since this call)."""
    global _offset_s, _drift, _since_mono
    _offset_s, _drift, _since_mono = offset_s, drift, time.monotonic()


def skew_s() -> float:
    """How far ahead (negative: behind) of real time the clock is now."""
    return _offset_s + _drift * (time.monotonic() - _since_mono)


def time_s() -> float:
    """Seconds since the epoch, as this member's clock reads them."""
    return time.time() + skew_s()


def now() -> dt.datetime:
    """The time as this member's clock reads it (UTC)."""
    return dt.datetime.fromtimestamp(time_s(), dt.UTC)
