"""Storage injectors against a real faultfs mount: a rule set and confirmed, its effect, the
revert and its journaled action repeated (idempotent), power loss after a real SIGKILL."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from rsdrill.engine.actions import carry_out
from rsdrill.faultfs.mount import Mount, unmount
from rsdrill.faultfs.rules import Rule
from rsdrill.platforms.machine.disk import PowerLossKill, StorageFault
from tests.harness.members import wait_until

pytest_plugins = ["tests.integration.faultfs_fixtures"]


def test_storage_fault_round_trip_and_its_revert_action_is_idempotent(
    faultfs: Callable[..., Mount],
) -> None:
    m = faultfs()
    target = m.mountpoint / "journal.log"
    target.write_bytes(b"ok")
    fault = StorageFault("disk-fault", "127.0.0.1:1", m.mountpoint,
                         Rule(errno="EROFS", operations=("write",)), None)  # fmt: skip
    action = fault.revert_action()
    assert action is not None and action["action"] == "faultfs-clear"
    assert not fault.verify(0.5)
    fault.inject()
    assert fault.verify(1.0)
    with pytest.raises(OSError) as caught:
        target.write_bytes(b"no")
    assert caught.value.errno == errno.EROFS
    fault.revert()
    target.write_bytes(b"again")
    assert "no rule to clear" in carry_out(action)
    unmount(m.mountpoint)
    assert "no longer mounted" in carry_out(action)


class _OneProcess:
    """ProcessHosts for one child process (the injector only kills it here)."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process

    def pid(self, host: str) -> int | None:
        return self.process.pid if self.process.poll() is None else None

    def kill(self, host: str) -> int:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(5)
        return self.process.pid

    def stop(self, host: str) -> int:
        raise NotImplementedError

    def cont(self, host: str) -> int:
        raise NotImplementedError

    def start(self, host: str, *, wipe: bool, boot_s: float = 0.0) -> None:
        raise NotImplementedError

    def restart_action(self, host: str, *, wipe: bool) -> dict[str, object]:
        return {}


WRITER = """
import os, sys, time
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT, 0o644)
os.write(fd, b"synced;")
os.fsync(fd)
os.write(fd, b"lost-on-power-loss")
open(sys.argv[1] + ".ready", "w").close()
time.sleep(60)
"""


def test_power_loss_kill_drops_what_the_killed_process_had_not_fsynced(
    faultfs: Callable[..., Mount],
) -> None:
    m = faultfs(track_unsynced=True)
    data = m.mountpoint / "data.wt"
    process = subprocess.Popen([sys.executable, "-c", WRITER, str(data)])
    try:
        wait_until(lambda: Path(f"{data}.ready").exists(), 10, "the writer")
        assert data.read_bytes() == b"synced;lost-on-power-loss"  # SIGKILL alone keeps it
        kill = PowerLossKill(_OneProcess(process), "127.0.0.1:1", m.mountpoint, restart=False,
                             wipe=False, restart_action=None)  # fmt: skip
        assert "power off" in kill.describe()
        started = time.monotonic()
        kill.inject()
        assert kill.verify(2.0) and time.monotonic() - started < 5
        assert data.read_bytes() == b"synced;"
        assert kill.undone[data.name] > 0
        assert not Path(f"{data}.ready").exists()  # created, never fsynced
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
        process.wait(5)
