"""Fixtures of the end-to-end tests."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rsdrill.platforms.machine import faketime
from rsdrill.platforms.machine.local_hosts import listening_pid
from rsdrill.sandbox.cluster import EmulatorEngine, Sandbox, up
from rsdrill.sandbox.config import Settings, build_topology, member_dir


def _existing_set(directory: Path, port_base: int, own_disks_mb: int = 0) -> Iterator[Path]:
    spec = build_topology("rs3", port_base=port_base,
                          settings=Settings(election_timeout_ms=1000))  # fmt: skip
    data = [member_dir(directory, m) / "data" for m in spec.members]

    def mount_own_disks() -> None:  # as a user would, before the members start
        for path in data:
            path.mkdir(parents=True, exist_ok=True)
            subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={own_disks_mb}m", "tmpfs",
                            str(path)], check=True)  # fmt: skip

    try:
        up(directory, spec, EmulatorEngine(), mount_own_disks if own_disks_mb else None)
        yield directory
    finally:
        running = [listening_pid(member.port) for member in spec.members]
        Sandbox(directory).down(grace_s=2.0)
        # A member the run restarted with its own command has no pid file: find it by its port.
        for member in spec.members:
            pid = listening_pid(member.port)
            if pid is not None:
                os.kill(pid, signal.SIGKILL)
        # Members a clock-skew run restarted under libfaketime leave what it shared otherwise.
        for pid in filter(None, running):
            faketime.release(pid)
        for path in data if own_disks_mb else ():
            if os.path.ismount(path):
                subprocess.run(["umount", "-l", str(path)], check=False)


@pytest.fixture
def existing_set(tmp_path: Path, free_port_base: Callable[[int], int]) -> Iterator[Path]:
    """A running rs3 (1 s elections) started outside the run, for `platform: local` targets;
    stopped afterwards, whatever happened."""
    yield from _existing_set(tmp_path / "existing", free_port_base(3))


@pytest.fixture
def existing_set_on_own_disks(
    tmp_path: Path, free_port_base: Callable[[int], int]
) -> Iterator[Path]:
    """`existing_set` with each member's dbpath a 64 MiB tmpfs of its own (disk-fill)."""
    yield from _existing_set(tmp_path / "existing", free_port_base(3), own_disks_mb=64)
