"""A process's CPU seconds from /proc: what the benches charge a server and its members with."""

from __future__ import annotations

import subprocess
import sys
import time

from rsdrill.procstat import cpu_seconds

BUSY_THEN_ASLEEP = """
import sys, time
end = time.process_time() + 0.5
while time.process_time() < end:
    pass
print("done", flush=True)
time.sleep(30)
"""


def test_cpu_seconds_count_a_process_s_work_and_none_once_it_is_gone() -> None:
    busy = subprocess.Popen([sys.executable, "-c", BUSY_THEN_ASLEEP], stdout=subprocess.PIPE,
                            text=True)  # fmt: skip
    try:
        assert busy.stdout is not None and busy.stdout.readline() == "done\n"
        used = cpu_seconds(busy.pid)
        # Its half second of computing and its start-up, in clock ticks (each field truncated).
        assert used is not None and 0.45 <= used < 2.0, used
        time.sleep(0.3)
        assert cpu_seconds(busy.pid) == used  # asleep: no more
    finally:
        busy.kill()
        busy.wait()
    assert cpu_seconds(busy.pid) is None
