"""The suite's scratch root in memory (tests/harness/scratch.py): only a directory of ours alone,
as /dev/shm is everybody's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.harness import scratch


@pytest.fixture
def shm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(scratch, "SHM", tmp_path)
    monkeypatch.setattr(scratch, "_is_tmpfs", lambda path: path == tmp_path)
    monkeypatch.delenv("TMPDIR", raising=False)
    return tmp_path / f"rsdrill-tests-{os.getuid()}"


def test_a_private_directory_is_made_and_used_again(shm: Path) -> None:
    assert scratch.memory_root() == shm
    assert shm.stat().st_mode & 0o777 == 0o700
    assert scratch.memory_root() == shm


@pytest.mark.parametrize("mode", [0o755, 0o770, 0o777])
def test_a_directory_others_may_enter_is_not_used(shm: Path, mode: int) -> None:
    shm.mkdir()
    shm.chmod(mode)
    assert scratch.memory_root() is None


def test_a_link_in_its_place_is_not_followed(shm: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    shm.symlink_to(elsewhere)
    assert scratch.memory_root() is None


def test_a_tmpdir_chosen_or_no_tmpfs_leaves_the_scratch_where_it_was(
    shm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TMPDIR", "/var/tmp")
    assert scratch.memory_root() is None
    monkeypatch.delenv("TMPDIR")
    monkeypatch.setattr(scratch, "_is_tmpfs", lambda path: False)
    assert scratch.memory_root() is None
    assert not shm.exists()
