"""The fault-injecting filesystem on a real FUSE mount: passthrough, errors, latency, caps,
detach, power loss, and the mount's lifecycle (owner death, a crashed daemon's stale mount)."""

from __future__ import annotations

import contextlib
import errno
import json
import mmap
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from rsdrill.faultfs.control import ControlError, request, socket_name
from rsdrill.faultfs.mount import (
    Mount,
    daemon_pid,
    faultfs_mounts,
    is_mounted,
    mount,
    unmount,
    unmount_all,
)
from tests.harness.members import wait_until
from tests.integration.faultfs_support import set_rule

pytest_plugins = ["tests.integration.faultfs_fixtures"]

MakeMount = Callable[..., Mount]


def _errno_of(action: Callable[[], object]) -> int | None:
    try:
        action()
    except OSError as exc:
        return exc.errno
    return None


def _write(path: Path, data: bytes, *, sync: bool = False) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def test_passthrough_lands_in_the_backing_directory(faultfs: MakeMount) -> None:
    m = faultfs(separate=True)
    point, backing = m.mountpoint, m.source
    (point / "dir").mkdir()
    (point / "dir" / "a").write_bytes(b"hello")
    os.rename(point / "dir" / "a", point / "dir" / "b")
    with open(point / "dir" / "b", "r+b") as f:
        f.seek(3)
        f.write(b"P!")
        f.truncate(4)
    assert (backing / "dir" / "b").read_bytes() == b"helP"
    assert sorted(os.listdir(point / "dir")) == ["b"]
    assert (point / "dir" / "b").stat().st_size == 4
    os.unlink(point / "dir" / "b")
    os.rmdir(point / "dir")
    assert os.listdir(backing) == []


def test_errno_on_matching_path_and_operation_only(faultfs: MakeMount) -> None:
    m = faultfs()
    (m.mountpoint / "journal").mkdir()
    _write(m.mountpoint / "journal" / "j1", b"x")
    _write(m.mountpoint / "data", b"x")
    set_rule(m, "jrnl", errno="ENOSPC", operations=["write"], path="journal/*")
    assert _errno_of(lambda: _write(m.mountpoint / "journal" / "j1", b"y")) == errno.ENOSPC
    assert _errno_of(lambda: _write(m.mountpoint / "data", b"y")) is None
    assert (m.mountpoint / "journal" / "j1").read_bytes() == b"x"  # reads not targeted
    set_rule(m, "jrnl", errno="EIO", operations=["read", "open"], path="journal/*")
    assert _errno_of(lambda: (m.mountpoint / "journal" / "j1").read_bytes()) == errno.EIO
    request(m.mountpoint, {"op": "clear", "name": "jrnl"})
    assert (m.mountpoint / "journal" / "j1").read_bytes() == b"x"


def test_fsync_error_and_probability(faultfs: MakeMount) -> None:
    m = faultfs()
    target = m.mountpoint / "f"
    _write(target, b"x")
    set_rule(m, "sync", errno="EIO", operations=["fsync"])
    assert _errno_of(lambda: _write(target, b"y", sync=True)) == errno.EIO
    set_rule(m, "sync", errno="EIO", operations=["fsync"], probability=0.5)
    fd = os.open(target, os.O_WRONLY)
    try:
        failures = sum(_errno_of(lambda: os.fsync(fd)) == errno.EIO for _ in range(200))
    finally:
        os.close(fd)
    assert 60 <= failures <= 140, failures
    counters = request(m.mountpoint, {"op": "status"})["counters"]
    assert counters["failed_fsync"] == failures + 1
    # The clear's reply counts the dropped rule's hits to its last operation (set again, the
    # rule counts afresh).
    cleared = request(m.mountpoint, {"op": "clear", "name": "sync"})
    assert cleared["cleared"] == ["sync"]
    assert cleared["rule_hits"]["sync"]["failed"] == failures
    assert cleared["rule_hits"]["sync"]["matched"] == 200


def test_latency_is_added_to_matching_operations(faultfs: MakeMount) -> None:
    m = faultfs()
    target = m.mountpoint / "f"
    _write(target, b"x")
    set_rule(m, "slow", latency_s=0.08, operations=["fsync"])
    started = time.monotonic()
    _write(target, b"y", sync=True)
    assert 0.075 <= time.monotonic() - started < 1.0
    started = time.monotonic()
    target.read_bytes()
    assert time.monotonic() - started < 0.075  # reads are not slowed


CALLERS = 4
"""Callers at once in `_ops_in`: one alone offers an op per round trip (its own wake-up and the
daemon's), so under a 50/s cap it needs each under 20 ms to reach the cap, which a loaded
machine did not give it (26 reads in 1 s). Offered by several, the cap is what limits them."""


def _ops_in(seconds: float, operation: Callable[[], object]) -> int:
    """How many `operation()` calls `CALLERS` callers complete in `seconds`."""
    counts = [0] * CALLERS
    deadline = time.monotonic() + seconds

    def call(n: int) -> None:
        while time.monotonic() < deadline:
            operation()
            counts[n] += 1

    workers = [threading.Thread(target=call, args=(n,)) for n in range(1, CALLERS)]
    for worker in workers:
        worker.start()
    call(0)
    for worker in workers:
        worker.join()
    return sum(counts)


def test_iops_caps_are_separate_for_reads_and_writes(faultfs: MakeMount) -> None:
    m = faultfs()
    fd = os.open(m.mountpoint / "f", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, b"z" * 4096, 0)
        set_rule(m, "cap", write_iops=100)
        writes = _ops_in(1.5, lambda: os.pwrite(fd, b"w" * 4096, 0))
        # A tenth of a second's burst plus 1.5 s at 100/s; generous bounds for a busy machine.
        assert 110 <= writes <= 200, writes
        reads = _ops_in(0.5, lambda: os.pread(fd, 4096, 0))
        assert reads > 300, reads  # not capped (the kernel may also serve some from its cache)
    finally:
        os.close(fd)


def test_direct_reads_reach_the_read_cap(faultfs: MakeMount) -> None:
    m = faultfs()
    (m.mountpoint / "f").write_bytes(b"r" * 65536)
    set_rule(m, "cap", read_iops=50)
    fd = os.open(m.mountpoint / "f", os.O_RDONLY | os.O_DIRECT)  # past the page cache
    buf = mmap.mmap(-1, 4096)
    try:
        reads = _ops_in(1.0, lambda: os.preadv(fd, [buf], 0))
    finally:
        os.close(fd)
    assert 45 <= reads <= 75, reads  # a 5-op burst plus 1 s at 50/s
    assert bytes(buf[:4]) == b"rrrr"


def test_bandwidth_cap_paces_large_writes(faultfs: MakeMount) -> None:
    m = faultfs()
    set_rule(m, "bw", write_bytes_per_s=1024 * 1024)
    started = time.monotonic()
    _write(m.mountpoint / "big", os.urandom(2 * 1024 * 1024))
    elapsed = time.monotonic() - started
    assert 1.6 <= elapsed <= 4.0, elapsed  # 2 MiB at 1 MiB/s less one 128 KiB burst


def test_detach_fails_everything_at_once_and_clear_releases_queued_operations(
    faultfs: MakeMount,
) -> None:
    m = faultfs()
    target = m.mountpoint / "f"
    _write(target, b"x")
    # A write queued behind a 1-IOPS cap must not wait out its slot once the rule is cleared.
    set_rule(m, "cap", write_iops=1)
    fd = os.open(target, os.O_WRONLY)
    os.pwrite(fd, b"a", 0)
    finished: list[float] = []

    def queued() -> None:
        for _ in range(5):
            os.pwrite(fd, b"b", 0)
        finished.append(time.monotonic())

    def delayed() -> int:
        return int(request(m.mountpoint, {"op": "status"})["counters"].get("delayed", 0))

    before = delayed()
    thread = threading.Thread(target=queued)
    thread.start()
    wait_until(lambda: delayed() > before, 5, "a write queued behind the cap")
    cleared_at = time.monotonic()
    request(m.mountpoint, {"op": "clear"})
    thread.join(5)
    os.close(fd)
    assert finished and finished[0] - cleared_at < 1.5

    set_rule(m, "gone", detach=True)
    started = time.monotonic()
    assert _errno_of(lambda: target.read_bytes()) == errno.EIO
    assert _errno_of(lambda: _write(m.mountpoint / "new", b"x")) == errno.EIO
    assert _errno_of(lambda: os.listdir(m.mountpoint)) == errno.EIO
    assert _errno_of(lambda: (m.mountpoint / "f").stat()) == errno.EIO
    assert time.monotonic() - started < 1.0
    assert m.mountpoint.stat().st_mode  # the mount point itself still answers
    request(m.mountpoint, {"op": "clear", "name": "gone"})
    assert target.read_bytes() == b"b"  # the queued writes went through


def test_power_loss_drops_what_was_not_fsynced(faultfs: MakeMount) -> None:
    m = faultfs(track_unsynced=True)
    synced, unsynced, fresh = (m.mountpoint / n for n in ("synced", "unsynced", "fresh"))
    _write(synced, b"A" * 10000, sync=True)
    _write(unsynced, b"B" * 5000, sync=True)
    with open(unsynced, "r+b") as f:  # overwrite the middle, extend, never fsync
        f.seek(1000)
        f.write(b"C" * 6000)
    with open(synced, "r+b") as f:  # changed, then fsynced: stays
        f.write(b"D" * 10)
        f.flush()
        os.fsync(f.fileno())
    with open(synced, "r+b") as f:  # shrunk without fsync: comes back
        f.truncate(100)
    _write(fresh, b"E" * 100)  # created, never fsynced: gone
    status = request(m.mountpoint, {"op": "status"})
    assert set(status["unsynced"]) == {"unsynced", "synced", "fresh"}
    undone = request(m.mountpoint, {"op": "power-loss"})["undone"]
    assert set(undone) == {"unsynced", "synced", "fresh"}
    assert unsynced.read_bytes() == b"B" * 5000
    assert synced.read_bytes() == b"D" * 10 + b"A" * 9990
    assert not fresh.exists()
    assert request(m.mountpoint, {"op": "status"})["unsynced"] == {}


def test_power_loss_needs_tracking(faultfs: MakeMount) -> None:
    m = faultfs()
    with pytest.raises(ControlError, match="tracking"):
        request(m.mountpoint, {"op": "power-loss"})


def test_sqlite_in_wal_mode_works_on_the_mount(faultfs: MakeMount) -> None:
    m = faultfs(track_unsynced=True)
    db = sqlite3.connect(m.mountpoint / "t.sqlite", isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)")
    db.executemany("INSERT INTO t (v) VALUES (?)", [("x" * 100,)] * 500)
    assert db.execute("SELECT count(*) FROM t").fetchone() == (500,)
    db.close()
    set_rule(m, "sync", errno="EIO", operations=["fsync"])
    db = sqlite3.connect(m.mountpoint / "t.sqlite", isolation_level=None)
    db.execute("PRAGMA synchronous=FULL")
    with pytest.raises(sqlite3.OperationalError, match="disk I/O error"):
        db.execute("INSERT INTO t (v) VALUES ('y')")
    db.close()


def test_rejects_bad_rules(faultfs: MakeMount) -> None:
    m = faultfs()
    with pytest.raises(ControlError, match="errno: unknown error name"):
        set_rule(m, "bad", errno="EWHATEVER")
    with pytest.raises(ControlError, match="probability"):
        set_rule(m, "bad", errno="EIO", probability=0)
    with pytest.raises(ControlError, match="unknown rule field"):
        set_rule(m, "bad", errno="EIO", colour="red")


def test_daemon_unmounts_when_its_owner_dies(faultfs_tools: None, tmp_path: Path) -> None:
    (tmp_path / "vol").mkdir()
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        m = mount(tmp_path / "vol", tmp_path / "vol", tmp_path / "state", owner_pid=owner.pid)
        assert is_mounted(m.mountpoint)
    finally:
        owner.kill()
        owner.wait()
    wait_until(lambda: not is_mounted(tmp_path / "vol"), 10, "the orphaned mount to go")
    pid = daemon_pid(tmp_path / "vol")
    if pid is not None:  # lingers for files still open; nothing is open here
        os.kill(pid, signal.SIGKILL)


def test_unmount_all_stops_a_daemon_whose_mount_is_already_gone(
    faultfs_tools: None, tmp_path: Path
) -> None:
    """The owner died with a file still open: the mount was detached lazily and its daemon
    lingers to serve that file. `unmount_all` (what `rsdrill recover` runs) stops it too."""
    (tmp_path / "vol").mkdir()
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        m = mount(tmp_path / "vol", tmp_path / "vol", tmp_path / "state", owner_pid=owner.pid)
        held = os.open(m.mountpoint / "open-file", os.O_RDWR | os.O_CREAT, 0o644)
    finally:
        owner.kill()
        owner.wait()
    try:
        wait_until(lambda: not is_mounted(m.mountpoint), 10, "the orphaned mount to go")
        assert daemon_pid(m.mountpoint) == m.pid
        done = unmount_all(tmp_path, timeout_s=1.0)
        assert done == [f"{m.mountpoint}: no faultfs mounted; its daemon {m.pid} stopped"]
        assert daemon_pid(m.mountpoint) is None
        assert unmount_all(tmp_path) == []
    finally:
        with contextlib.suppress(OSError):  # its mount's connection is gone
            os.close(held)
        if (pid := daemon_pid(m.mountpoint)) is not None:
            os.kill(pid, signal.SIGKILL)


def test_unmount_clears_a_crashed_daemons_stale_mount(faultfs_tools: None, tmp_path: Path) -> None:
    (tmp_path / "vol").mkdir()
    (tmp_path / "vol" / "keep").write_text("kept")
    m = mount(tmp_path / "vol", tmp_path / "vol", tmp_path / "state")
    os.kill(m.pid, signal.SIGKILL)
    try:
        wait_until(lambda: daemon_pid(m.mountpoint) is None, 5, "the daemon to die")
        assert is_mounted(m.mountpoint)  # dead: "Transport endpoint is not connected"
        # ECONNABORTED once the kernel has aborted the dead connection; either way unusable.
        assert _errno_of(lambda: os.listdir(m.mountpoint)) in (errno.ENOTCONN, errno.ECONNABORTED)
    except AssertionError:
        unmount(m.mountpoint)  # a failed test must not leave a dead mount behind
        raise
    assert "unmounted" in unmount(m.mountpoint)
    assert not faultfs_mounts(tmp_path)
    assert (tmp_path / "vol" / "keep").read_text() == "kept"
    assert "no faultfs mounted" in unmount(m.mountpoint)


def test_new_files_belong_to_their_creator_not_the_daemon(faultfs: MakeMount) -> None:
    m = faultfs()
    os.chmod(m.mountpoint, 0o777)
    pid = os.fork()
    if pid == 0:  # a server running as its own user (nobody here)
        try:
            os.chdir(m.mountpoint)  # as root: pytest's own directories are closed to others
            os.setgid(65534)
            os.setuid(65534)
            os.mkdir("sub")
            Path("sub/f").write_text("x")
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert (m.source / "sub").stat().st_uid == 65534
    assert (m.source / "sub" / "f").stat()[4:6] == (65534, 65534)


NOBODY = 65534


def test_the_control_channel_refuses_other_users(faultfs: MakeMount) -> None:
    """The daemon runs as root here; a process of user `nobody` may not set a rule (a detach
    would fail the member's every I/O) nor trigger a power loss."""
    m = faultfs(track_unsynced=True)
    _write(m.mountpoint / "f", b"kept")
    # A bare client, as an attacker would write it (rsdrill's own code is not theirs to use).
    script = (
        "import socket, sys\n"
        "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
        "s.connect(bytes.fromhex(sys.argv[1]))\n"
        "s.sendall(sys.argv[2].encode() + b'\\n')\n"
        "print(s.makefile().readline())\n"
    )
    for message in ({"op": "set", "name": "x", "rule": {"detach": True}}, {"op": "power-loss"}):
        done = subprocess.run(
            ["/usr/bin/python3", "-c", script, socket_name(m.mountpoint).hex(),
             json.dumps(message)],
            capture_output=True, text=True, timeout=30, user=NOBODY, group=NOBODY, cwd="/",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        reply = json.loads(done.stdout)
        assert reply["ok"] is False, reply
        assert (
            f"refused: uid {NOBODY} is neither root nor the faultfs daemon's user"
            in (reply["error"])
        )
    # Nothing happened: no rule, the file is readable, the daemon still serves its owner.
    assert request(m.mountpoint, {"op": "status"})["rules"] == {}
    assert (m.mountpoint / "f").read_bytes() == b"kept"


def test_a_control_socket_another_user_bound_first_is_not_believed(tmp_path: Path) -> None:
    """An abstract socket's name is anyone's to take: a process of user `nobody` binds the one
    of a mount point before any daemon and answers every request `ok`. rsdrill must not take
    that for the mount (a fault reported set, or cleared, that never was)."""
    script = (
        "import json, socket, sys\n"
        "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
        "s.bind(bytes.fromhex(sys.argv[1]))\n"
        "s.listen(1)\n"
        "print('ready', flush=True)\n"
        "c, _ = s.accept()\n"
        "c.makefile().readline()\n"
        "c.sendall(json.dumps({'ok': True, 'rules': {}, 'cleared': []}).encode() + b'\\n')\n"
    )
    squatter = subprocess.Popen(
        ["/usr/bin/python3", "-c", script, socket_name(tmp_path).hex()],
        stdout=subprocess.PIPE, text=True, user=NOBODY, group=NOBODY, cwd="/",
    )  # fmt: skip
    try:
        assert squatter.stdout is not None and squatter.stdout.readline() == "ready\n"
        with pytest.raises(ControlError, match=rf"served by uid {NOBODY}, neither root"):
            request(tmp_path, {"op": "clear"})
    finally:
        squatter.kill()
        squatter.communicate(timeout=10)
