"""The stall probe on a real thread: a process that does not run for a while is recorded."""

from __future__ import annotations

import sys
import time

from rsdrill.history import History, RunClock
from rsdrill.probes.stall import LATE_S, StallProbe


def test_the_gil_held_for_a_while_is_recorded_as_stalls() -> None:
    history = History()
    probe = StallProbe(history, RunClock.start())
    probe.start()
    time.sleep(0.3)
    # Another thread of this process holds the GIL for 0.4 s at a time: the probe's thread
    # cannot run, as when a C extension holds it or the process gets no CPU.
    before = sys.getswitchinterval()
    sys.setswitchinterval(0.4)
    try:
        spin_until = time.monotonic() + 1.5
        while time.monotonic() < spin_until:
            pass
    finally:
        sys.setswitchinterval(before)
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
