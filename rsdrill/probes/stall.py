"""The probe of the probe host itself: did rsdrill's own process stall?

Every probe measures a gap as the time between two answers it saw. When rsdrill's process does
not run (CPU starvation on a loaded machine, the GIL held by a C extension, swapping, the process
stopped), no probe sees anything either, and the gap looks like the cluster's. This probe sends
nothing to the cluster: a thread that sleeps `INTERVAL_S` at a time and records one op each time
it wakes up more than `LATE_S` past its due time, so the analyzers can tell which gaps the
process itself could have caused.

Its op: probe `STALL_PROBE`, op "wake", outcome "timeout", `t_start` the due time, `t_end` the
actual wake-up, detail `{"late_s": ...}`. A wake-up on time records nothing.

Cost: 0.5-1 % of one core (100 wake-ups a second, 5-10 ms of CPU a second). In an otherwise
idle process its wake-ups came 0.11 ms late at the median, 3.4 ms at p99, 24 ms at most, well
below `LATE_S` (`python bench/stall_probe_cost.py`, bench/results/stall-probe-cost.txt).
"""

from __future__ import annotations

import time

from rsdrill.history import STALL_PROBE, History, RunClock
from rsdrill.probes.base import Probe

INTERVAL_S = 0.010
"""How often the thread wakes up: a stall is measured to within this."""
LATE_S = 0.100
"""A wake-up later than this past its due time is a stall; the scheduler's ordinary jitter and
the interpreter's 5 ms GIL switch interval stay well below it."""


class StallProbe(Probe):
    """Records each time this process woke up more than `LATE_S` late."""

    name = STALL_PROBE

    def __init__(self, history: History, clock: RunClock) -> None:
        super().__init__(history, clock, INTERVAL_S)

    def _run(self) -> None:
        due = self.clock.now() + self.interval_s
        while not self.stopping:
            # A plain sleep, not the stop event's wait: it costs less than half as much CPU, and
            # stopping waits one interval at most.
            time.sleep(max(due - self.clock.now(), 0.0))
            woke = self.clock.now()
            late = woke - due
            if late > LATE_S:
                self.record("wake", None, due, "timeout", {"late_s": round(late, 6)})
            # From this wake-up on: a stall is one op, however many wake-ups it swallowed.
            due = woke + self.interval_s
