"""Fixtures of the end-to-end tests."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rsdrill.platforms.machine.local_hosts import listening_pid
from rsdrill.sandbox.cluster import EmulatorEngine, Sandbox, up
from rsdrill.sandbox.config import Settings, build_topology


@pytest.fixture
def existing_set(tmp_path: Path, free_port_base: Callable[[int], int]) -> Iterator[Path]:
    """A running rs3 (1 s elections) started outside the run, for `platform: local` targets;
    stopped afterwards, whatever happened."""
    directory = tmp_path / "existing"
    spec = build_topology(
        "rs3", port_base=free_port_base(3), settings=Settings(election_timeout_ms=1000)
    )
    up(directory, spec, EmulatorEngine())
    yield directory
    Sandbox(directory).down(grace_s=2.0)
    # A member the run restarted with its own command has no pid file: find it by its port.
    for member in spec.members:
        pid = listening_pid(member.port)
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
