"""A member process is gone only once every thread of it is. Its main thread can end first (a
thread inside a system call, as the commit thread in an fsync, dies only once the call returns)
and the process is then a zombie whose other thread still holds its files, the listening socket
too: a restart on the port then fails to bind (seen once in a CI rehearsal, `address already in
use`, restarting a member killed under heavy writes)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from rsdrill.procstat import stat_fields
from rsdrill.sandbox.cluster import port_free, process_state, wait_gone

# Listens on a port, then its main thread ends while another thread lives on for a while.
MAIN_THREAD_ENDS_FIRST = """
import ctypes, socket, sys, threading, time
listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen()
print(listener.getsockname()[1], flush=True)
threading.Thread(target=time.sleep, args=(float(sys.argv[1]),)).start()
ctypes.CDLL(None).pthread_exit(None)
"""


@pytest.mark.timeout(30)
def test_a_process_whose_main_thread_ended_runs_until_its_last_thread_ends(
    tmp_path: Path,
) -> None:
    child = subprocess.Popen([sys.executable, "-c", MAIN_THREAD_ENDS_FIRST, "2.0"],
                             stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert child.stdout is not None
    port = int(child.stdout.readline())
    deadline = time.monotonic() + 10
    while (stat_fields(child.pid) or ["?"])[0] != "Z":
        assert time.monotonic() < deadline, "the main thread did not end"
        time.sleep(0.01)
    assert process_state(child.pid, port) not in (None, "Z", "X")
    assert not port_free("127.0.0.1", port)
    pid_path = tmp_path / str(port) / "pid"
    assert wait_gone({pid_path: child.pid}, time.monotonic() + 10) == {}
    assert process_state(child.pid, port) is None
    assert port_free("127.0.0.1", port)
    child.wait(timeout=5)
