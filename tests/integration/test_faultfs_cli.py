"""`rsdrill faultfs mount|status|unmount` as a user runs them, and unmounting a busy mount."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from rsdrill.faultfs.binding import MISSING
from rsdrill.faultfs.mount import FaultFSError, daemon_pid, is_mounted, mount, unmount
from tests.harness.cli import rsdrill_run
from tests.harness.members import wait_until

pytest_plugins = ["tests.integration.faultfs_fixtures"]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return rsdrill_run(["faultfs", *args],
                       capture_output=True, text=True, timeout=60)  # fmt: skip


def test_mount_status_unmount_round_trip(faultfs_tools: None, tmp_path: Path) -> None:
    dbpath = tmp_path / "db"
    dbpath.mkdir()
    (dbpath / "WiredTiger").write_text("kept")
    mounted = _cli("mount", str(dbpath), str(dbpath))
    try:
        assert mounted.returncode == 0, mounted.stderr
        assert "mounted on" in mounted.stdout and is_mounted(dbpath)
        assert (dbpath / "WiredTiger").read_text() == "kept"
        status = _cli("status", str(dbpath))
        assert status.returncode == 0
        report = json.loads(status.stdout)
        assert report["rules"] == {} and report["track_unsynced"] is True
        assert (tmp_path / ".faultfs-db" / "faultfs.log").exists()
    finally:
        done = _cli("unmount", str(dbpath))
    assert done.returncode == 0 and "unmounted" in done.stdout
    assert not is_mounted(dbpath)
    again = _cli("unmount", str(dbpath))
    assert again.returncode == 0 and "no faultfs mounted" in again.stdout


def test_bad_input_is_one_line_and_exit_2(faultfs_tools: None, tmp_path: Path) -> None:
    missing = _cli("mount", str(tmp_path / "nope"), str(tmp_path))
    assert missing.returncode == 2 and "SOURCE" in missing.stderr
    assert "Traceback" not in missing.stderr
    nothing = _cli("status", str(tmp_path))
    assert nothing.returncode == 2 and "no faultfs daemon serves" in nothing.stderr


def test_busy_mount_is_detached_lazily_and_its_daemon_leaves_once_files_close(
    faultfs_tools: None, tmp_path: Path
) -> None:
    (tmp_path / "vol").mkdir()
    m = mount(tmp_path / "vol", tmp_path / "vol", tmp_path / "state")
    held = os.open(m.mountpoint / "open-file", os.O_RDWR | os.O_CREAT, 0o644)
    outcome: list[str] = []
    waiter = threading.Thread(target=lambda: outcome.append(unmount(m.mountpoint, timeout_s=20)))
    started = time.monotonic()
    try:
        waiter.start()
        wait_until(lambda: not is_mounted(m.mountpoint), 10, "the lazy detach")
        os.write(held, b"still served")  # the detached mount still serves the open file
    finally:
        os.close(held)
    waiter.join(25)
    assert outcome and "unmounted" in outcome[0]
    assert time.monotonic() - started < 10  # it left when the file closed, not at the deadline
    assert daemon_pid(m.mountpoint) is None
    assert (tmp_path / "vol" / "open-file").read_bytes() == b"still served"


def test_without_mfusepy_the_python_layer_names_the_extra_in_one_line(
    faultfs_tools: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon's one line, as a mount shows it, where mfusepy is not installed (the
    `faultfs` extra); nothing is left mounted."""
    hidden = tmp_path / "site"
    hidden.mkdir()
    (hidden / "sitecustomize.py").write_text("import sys\nsys.modules['mfusepy'] = None\n")
    monkeypatch.setenv("PYTHONPATH", str(hidden))
    (tmp_path / "vol").mkdir()
    with pytest.raises(FaultFSError) as raised:
        mount(tmp_path / "vol", tmp_path / "vol", tmp_path / "state", layer="python")
    assert MISSING in str(raised.value)
    assert (tmp_path / "state" / "faultfs.log").read_text().strip().splitlines()[-1] == MISSING
    assert not is_mounted(tmp_path / "vol")
