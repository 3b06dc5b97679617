"""Fixtures for tests on a real faultfs mount (a pytest plugin: `pytest_plugins = [...]`):
the install script run once, and mounts that are always unmounted after the test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rsdrill.faultfs.mount import Mount, daemon_pid, faultfs_mounts, mount, unmount, unmount_all
from tests.integration.faultfs_support import ensure_faultfs_tools


@pytest.fixture(scope="session")
def faultfs_tools() -> None:
    ensure_faultfs_tools()


def _mounts(root: Path) -> Iterator[Callable[..., Mount]]:
    made: list[Mount] = []

    def make(name: str = "vol", *, separate: bool = False, **options: Any) -> Mount:
        source = root / name
        source.mkdir()
        point = root / f"{name}-mnt" if separate else source
        point.mkdir(exist_ok=True)
        made.append(mount(source, point, root / f"{name}-state", **options))
        return made[-1]

    yield make
    for m in made:
        unmount(m.mountpoint)
    left = faultfs_mounts(root)
    assert not left, f"mounts left behind: {left}"


@pytest.fixture
def faultfs(faultfs_tools: None, tmp_path: Path) -> Iterator[Callable[..., Mount]]:
    """Mount a fresh directory (over itself unless `separate`); every mount is undone after."""
    yield from _mounts(tmp_path)


@pytest.fixture
def faultfs_on_disk(faultfs_tools: None, disk_tmp_path: Path) -> Iterator[Callable[..., Mount]]:
    """`faultfs` with the directories on the disk (tests/harness/scratch.py), for what a
    block device does that memory does not."""
    yield from _mounts(disk_tmp_path)


@pytest.fixture
def no_faultfs_mount_left(faultfs_tools: None, tmp_path: Path) -> Iterator[None]:
    """For runs that mount faultfs themselves: after the test, none of their mounts or daemons
    may be left (any that is gets unmounted, so that the next test starts clean)."""
    yield
    left = faultfs_mounts(tmp_path)
    unmount_all(tmp_path)
    assert not left, f"faultfs mounts left behind: {left}"
    assert all(daemon_pid(p) is None for p in left)
