"""The stall probe on a real thread: a process that does not run for a while is recorded."""

from __future__ import annotations

import sys
import time

from rsdrill.history import LATE_START_OP, STALL_PROBE, History, RunClock
from rsdrill.probes.base import LATE_START_S, Probe
from rsdrill.probes.stall import LATE_S, StallProbe


def _hold_the_gil(turn_s: float, for_s: float) -> None:
    """Spin in this thread, keeping the GIL `turn_s` at a time, `for_s` in all: the other
    threads cannot run, as when a C extension holds it or the process gets no CPU."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(turn_s)
    try:
        spin_until = time.monotonic() + for_s
        while time.monotonic() < spin_until:
            pass
    finally:
        sys.setswitchinterval(before)


def test_the_gil_held_for_a_while_is_recorded_as_stalls() -> None:
    history = History()
    probe = StallProbe(history, RunClock.start())
    probe.start()
    time.sleep(0.3)
    _hold_the_gil(0.4, 1.5)  # the probe's thread cannot run for 0.4 s at a time
    time.sleep(0.3)
    probe.stop()
    probe.join(timeout=5)
    ops = history.ops()
    assert ops, "no stall recorded"
    assert all(op.probe == "stall" and op.op == "wake" and op.member is None for op in ops)
    assert all(op.t_end - op.t_start > LATE_S for op in ops)
    assert all(op.detail["late_s"] > LATE_S for op in ops)
    # Each stall is one op, however many 10 ms wake-ups it swallowed.
    assert max(op.t_end - op.t_start for op in ops) >= 0.3
    assert len(ops) <= 1.5 / 0.3 + 2


class _Ticker(Probe):
    name = "read"
    records_late_starts = True

    def tick(self) -> None:
        self.record("find", None, self.clock.now(), "ok")


class _Quiet(_Ticker):
    name = "lag"
    records_late_starts = False


def test_an_availability_probe_records_the_ticks_it_began_late() -> None:
    history, clock = History(), RunClock.start()
    probes = [_Ticker(history, clock, 0.02), _Quiet(history, clock, 0.02)]
    for probe in probes:
        probe.start()
    time.sleep(0.2)
    _hold_the_gil(0.1, 0.6)  # the probes' threads wake up to 0.1 s late
    time.sleep(0.2)
    for probe in probes:
        probe.stop()
        probe.join(timeout=5)
    late = [op for op in history.ops() if op.op == LATE_START_OP]
    assert late, "no late start recorded"
    # Only the probe that says so records them, as the stall probe's ops: due time to start.
    assert all(op.probe == STALL_PROBE and op.detail == {"probe": "read"} for op in late)
    assert all(op.t_end - op.t_start > LATE_START_S for op in late)
    assert max(op.t_end - op.t_start for op in late) >= 0.05
    # Each late start is followed at once by the attempt it delayed.
    starts = [op.t_start for op in history.ops() if op.op == "find"]
    assert all(any(0 <= s - op.t_end < 0.05 for s in starts) for op in late)
