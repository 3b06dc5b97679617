"""A mirrored faultfs mount on real FUSE: every change lands in both backing replicas, a failed
replica is masked (the caller sees no error) and marked degraded, and once its rule is cleared
it is resynced in the background until both replicas hold the same tree, also while writes go
on; files left open across the failure reach both replicas again. Refusals: replica rules on a
mount with one backing directory, the compiled layer, unsynced-write tracking."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rsdrill.faultfs.control import ControlError, request
from rsdrill.faultfs.mirror import MIRROR_FILE, resync_offline
from rsdrill.faultfs.mount import (
    FaultFSError,
    Mount,
    faultfs_mounts,
    is_mounted,
    mount,
    unmount,
)
from rsdrill.platforms.machine.actions import faultfs_clear
from tests.harness.members import wait_until
from tests.integration.faultfs_support import set_rule

pytest_plugins = ["tests.integration.faultfs_fixtures"]


def tree(root: Path) -> dict[str, str]:
    """Every entry below `root`: a file's sha256, "dir" or a link's target."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            out[rel] = f"-> {os.readlink(path)}"
        elif path.is_dir():
            out[rel] = "dir"
        else:
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


@pytest.fixture
def mirrored(faultfs_tools: None, tmp_path: Path) -> Iterator[Mount]:
    """Replica a (`a/`) and b (`b/`) served on `mnt/`, each directory visible to the test."""
    for name in ("a", "b", "mnt"):
        (tmp_path / name).mkdir()
    m = mount(tmp_path / "a", tmp_path / "mnt", tmp_path / "state", mirror=tmp_path / "b")
    yield m
    unmount(m.mountpoint)
    assert not faultfs_mounts(tmp_path)


def replicas(m: Mount) -> dict[str, Any]:
    status = request(m.mountpoint, {"op": "status"})
    assert status["layer"] == "python"  # the compiled layer has one backing directory
    return dict(status["replicas"])


def in_sync(m: Mount, name: str) -> bool:
    return bool(replicas(m)[name]["state"] == "in-sync")


def write(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def test_changes_land_in_both_replicas(mirrored: Mount, tmp_path: Path) -> None:
    point = mirrored.mountpoint
    (point / "journal").mkdir()
    write(point / "journal" / "WiredTigerLog.1", b"x" * 100_000)
    (point / "collection.wt").write_bytes(b"data")
    os.rename(point / "collection.wt", point / "collection-0.wt")
    os.symlink("collection-0.wt", point / "link")
    (point / "gone").write_text("soon")
    os.unlink(point / "gone")
    assert tree(tmp_path / "a") == tree(tmp_path / "b") == tree(point)
    assert set(tree(point)) == {"journal", "journal/WiredTigerLog.1", "collection-0.wt", "link"}
    assert replicas(mirrored)["a"]["state"] == replicas(mirrored)["b"]["state"] == "in-sync"


def test_a_failed_replica_is_masked_degraded_and_resynced(mirrored: Mount, tmp_path: Path) -> None:
    point = mirrored.mountpoint
    write(point / "before", b"1" * 5000)
    held = os.open(point / "before", os.O_RDWR)  # open across the failure and the resync
    try:
        set_rule(mirrored, "disk-a", errno="EIO", operations=["any"], replica="a")
        # Every operation succeeds: replica a's failures are masked by b.
        write(point / "before", b"2" * 5000)
        write(point / "during", b"3" * 70_000)
        (point / "dir").mkdir()
        write(point / "dir" / "nested", b"4")
        assert (point / "during").read_bytes() == b"3" * 70_000
        state = replicas(mirrored)["a"]
        assert state["state"] == "degraded" and state["error"] == "Input/output error"
        assert state["failed_operations"] >= 1 and state["degraded_at"] is not None
        assert not (tmp_path / "a" / "during").exists()  # a is left alone from now on
        assert tree(tmp_path / "b") == tree(point)
        rule_hits = request(point, {"op": "status"})["rule_hits"]["disk-a"]
        assert rule_hits["failed"] >= 1
        # The record next to the mount says so too (a crash now would resync a on next mount).
        assert '"degraded"' in (tmp_path / "state" / MIRROR_FILE).read_text()

        request(point, {"op": "clear", "name": "disk-a"})
        wait_until(lambda: in_sync(mirrored, "a"), 30, "replica a resynced")
        (resync,) = replicas(mirrored)["a"]["resyncs"]
        assert resync["from"] == "b" and 0 < resync["seconds"] < 30
        assert resync["bytes"] >= 70_000 + 10_000 and resync["files"] >= 3
        assert tree(tmp_path / "a") == tree(tmp_path / "b") == tree(point)

        # The file open all along writes to both replicas again.
        os.pwrite(held, b"5" * 10, 0)
        os.fsync(held)
        assert (tmp_path / "a" / "before").read_bytes()[:10] == b"5" * 10
        assert tree(tmp_path / "a") == tree(tmp_path / "b")
    finally:
        os.close(held)


def test_resync_while_writes_go_on_ends_with_equal_replicas(
    mirrored: Mount, tmp_path: Path
) -> None:
    point = mirrored.mountpoint
    for i in range(20):  # 40 MB: the first pass takes a while, the writes go on meanwhile
        write(point / f"file-{i}", os.urandom(2_000_000))
    set_rule(mirrored, "disk-a", errno="EIO", operations=["write"], replica="a")
    write(point / "file-0", b"degrades a")
    assert replicas(mirrored)["a"]["state"] == "degraded"
    stop = threading.Event()
    written = [0]
    failures: list[BaseException] = []

    def writer() -> None:
        try:
            while not stop.is_set():
                n = written[0]
                write(point / f"file-{n % 20}", os.urandom(4096))
                if n % 50 == 0:  # renames and removals too, as a database checkpoint does
                    (point / "tmp.turtle").write_bytes(os.urandom(100))
                    os.rename(point / "tmp.turtle", point / "turtle")
                written[0] = n + 1
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        wait_until(lambda: written[0] >= 5 or bool(failures), 30, "writes going on")
        request(point, {"op": "clear", "name": "disk-a"})
        wait_until(lambda: in_sync(mirrored, "a"), 60, "replica a resynced under writes")
        after = written[0]  # then writes to both replicas, too
        wait_until(lambda: written[0] >= after + 5 or bool(failures), 30, "writes after")
    finally:
        stop.set()
        thread.join(30)
    assert not failures, failures
    resync = replicas(mirrored)["a"]["resyncs"][0]
    assert resync["held_s"] < resync["seconds"] < 60, resync
    assert tree(tmp_path / "a") == tree(tmp_path / "b") == tree(point)


def test_a_replica_out_of_sync_at_a_crash_is_resynced_next_time(
    faultfs_tools: None, tmp_path: Path
) -> None:
    for name in ("a", "b", "mnt"):
        (tmp_path / name).mkdir()
    options: dict[str, Any] = {"mirror": tmp_path / "b"}
    m = mount(tmp_path / "a", tmp_path / "mnt", tmp_path / "state", **options)
    try:
        set_rule(m, "disk-b", errno="EIO", operations=["write"], replica="b")
        write(m.mountpoint / "only-in-a", b"z" * 1000)
        assert replicas(m)["b"]["state"] == "degraded"
    finally:
        unmount(m.mountpoint)  # the rule never cleared: b stays out of sync on disk
    assert (tmp_path / "b" / "only-in-a").read_bytes() == b""  # created, never written
    m = mount(tmp_path / "a", tmp_path / "mnt", tmp_path / "state", **options)
    try:
        wait_until(lambda: in_sync(m, "b"), 30, "replica b resynced at mount")
        assert tree(tmp_path / "a") == tree(tmp_path / "b")
        # Offline (the mount gone): a degraded record is resynced the same way.
        set_rule(m, "disk-b", errno="EIO", operations=["write"], replica="b")
        write(m.mountpoint / "later", b"y")
    finally:
        unmount(m.mountpoint)
    assert tree(tmp_path / "a") != tree(tmp_path / "b")
    # What `rsdrill recover` does with the journaled revert of that fault, the mount gone.
    record = str(tmp_path / "state" / MIRROR_FILE)
    action = {"action": "faultfs-clear", "host": "h", "mountpoint": str(m.mountpoint),
              "rule": "disk-b", "restart": None,
              "mirror": {"replica": "b", "record": record}}  # fmt: skip
    done = faultfs_clear(action)
    assert done.startswith("h: faultfs no longer mounted, nothing to clear; replica b resynced "
                           "from a ("), done  # fmt: skip
    assert done.endswith("bytes) (offline)"), done
    assert tree(tmp_path / "a") == tree(tmp_path / "b")
    assert resync_offline(tmp_path / "state" / MIRROR_FILE) == []  # idempotent
    assert faultfs_clear(action).endswith("replica b in sync")


def test_both_replicas_failing_is_the_callers_error(mirrored: Mount) -> None:
    set_rule(mirrored, "disk-a", errno="EIO", operations=["write"], replica="a")
    set_rule(mirrored, "disk-b", errno="ENOSPC", operations=["write"], replica="b")
    with pytest.raises(OSError) as raised:
        write(mirrored.mountpoint / "f", b"x")
    assert raised.value.errno == 5  # the first replica's: the operation's own error
    # Failing alike, neither is left behind by the other: both stay in sync.
    assert {r["state"] for r in replicas(mirrored).values()} == {"in-sync"}


@pytest.mark.parametrize("layer", ["python", "compiled"])
def test_refusals(faultfs_tools: None, tmp_path: Path, layer: str) -> None:
    for name in ("one", "a", "b"):
        (tmp_path / name).mkdir()
    # Either layer refuses a replica's rule on a mount with one backing directory.
    single = mount(tmp_path / "one", tmp_path / "one", tmp_path / "one-state", layer=layer)
    try:
        with pytest.raises(ControlError, match="replica a: this mount has one backing"):
            set_rule(single, "r", errno="EIO", replica="a")
        with pytest.raises(ControlError, match="replica: 'c' is not one of a, b"):
            set_rule(single, "r", errno="EIO", replica="c")
        assert request(single.mountpoint, {"op": "status"})["rules"] == {}
    finally:
        unmount(single.mountpoint)
    with pytest.raises(FaultFSError, match="a mirrored mount is served by the Python layer"):
        mount(tmp_path / "a", tmp_path / "a", tmp_path / "s", mirror=tmp_path / "b",
              layer="compiled")  # fmt: skip
    with pytest.raises(FaultFSError, match="neither tracks unsynced writes"):
        mount(tmp_path / "a", tmp_path / "a", tmp_path / "s", mirror=tmp_path / "b",
              track_unsynced=True)  # fmt: skip
    assert not faultfs_mounts(tmp_path)


def test_an_owner_gone_clears_the_rules_and_keeps_serving_both_copies(
    faultfs_tools: None, tmp_path: Path
) -> None:
    """A run killed mid-fault: the mount over replica a's own directory (as a sandbox member's)
    is not detached, or the member's next new files would land on a alone; its rules go, the
    failed copy resyncs online, and what is written after still reaches both copies."""
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        m = mount(tmp_path / "a", tmp_path / "a", tmp_path / "state", mirror=tmp_path / "b",
                  owner_pid=owner.pid)  # fmt: skip
        set_rule(m, "disk-a", errno="EIO", operations=["any"], replica="a")
        write(m.mountpoint / "during", b"1" * 5000)
        assert replicas(m)["a"]["state"] == "degraded"
        owner.kill()
        owner.wait()
        wait_until(lambda: in_sync(m, "a"), 30, "replica a resynced once the owner was gone")
        assert is_mounted(m.mountpoint)
        assert request(m.mountpoint, {"op": "status"})["rules"] == {}
        write(m.mountpoint / "after", b"2" * 5000)
        assert (tmp_path / "b" / "after").read_bytes() == b"2" * 5000
    finally:
        owner.kill()
        unmount(tmp_path / "a")
    assert tree(tmp_path / "a") == tree(tmp_path / "b")
    assert not faultfs_mounts(tmp_path)
