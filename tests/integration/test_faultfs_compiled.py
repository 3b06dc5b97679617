"""The compiled faultfs data path (faultfs-rs): it is the default where built, passthrough and
a rule arriving while a file is open in passthrough, and the Python layer as the fallback where
it is not built (at install and at mount time)."""

from __future__ import annotations

import errno
import importlib.util
import mmap
import os
import time
from collections.abc import Callable

import pytest

from rsdrill.faultfs.compiled import BINARY_ENV, compiled_binary
from rsdrill.faultfs.control import request
from rsdrill.faultfs.mount import Mount
from rsdrill.faultfs.rules import Rule
from rsdrill.platforms.base import InjectionError
from rsdrill.platforms.machine.disk import StorageFault
from tests.harness.members import wait_until
from tests.integration.faultfs_support import ROOT, set_rule

pytest_plugins = ["tests.integration.faultfs_fixtures"]

MakeMount = Callable[..., Mount]

needs_compiled = pytest.mark.skipif(
    compiled_binary() is None, reason="faultfs-rs is not built (.ci/install-faultfs builds it)"
)


def _passed_through(m: Mount) -> list[str]:
    return list(request(m.mountpoint, {"op": "status"})["passthrough_open"])


@needs_compiled
def test_the_compiled_layer_serves_where_it_is_built(faultfs: MakeMount) -> None:
    m = faultfs(separate=True)
    assert request(m.mountpoint, {"op": "ping"})["layer"] == "compiled"
    (m.mountpoint / "f").write_bytes(b"x" * 300_000)  # more than one FUSE write
    assert (m.source / "f").read_bytes() == b"x" * 300_000
    counters = request(m.mountpoint, {"op": "status"})["counters"]
    assert counters["write"] >= 1 and counters["open"] >= 1


@needs_compiled
def test_a_rule_arriving_while_a_file_is_open_in_passthrough(faultfs: MakeMount) -> None:
    """The documented choice: a file opened while no rule is set is passed through, and the
    kernel cannot take that back, so a rule set later reaches it once every descriptor of it is
    closed; meanwhile `status` names it, and new opens of it share the passthrough."""
    m = faultfs(separate=True, passthrough=True)
    (m.source / "data").write_bytes(b"before")
    assert request(m.mountpoint, {"op": "ping"})["passthrough"] is True
    first = os.open(m.mountpoint / "data", os.O_RDWR)
    try:
        assert _passed_through(m) == ["data"]
        # The reply names the files the rule misses; a rule for other files misses none.
        assert set_rule(m, "elsewhere", errno="EIO", path="journal/*")["unreached"] == []
        request(m.mountpoint, {"op": "clear", "name": "elsewhere"})
        assert set_rule(m, "eio", errno="EIO", operations=["read", "write"])["unreached"] == [
            "data"
        ]
        assert os.pread(first, 6, 0) == b"before"  # outside the rule, as documented
        os.pwrite(first, b"during", 0)
        second = os.open(m.mountpoint / "data", os.O_RDONLY)  # while the first is still open
        try:
            assert os.pread(second, 6, 0) == b"during"
        finally:
            os.close(second)
        assert _passed_through(m) == ["data"]
        assert request(m.mountpoint, {"op": "status"})["rule_hits"]["eio"].get("failed", 0) == 0
    finally:
        os.close(first)
    wait_until(lambda: _passed_through(m) == [], 5, "the passthrough file to be released")
    fd = os.open(m.mountpoint / "data", os.O_RDONLY)
    try:
        with pytest.raises(OSError) as failed:
            os.pread(fd, 6, 0)
        assert failed.value.errno == errno.EIO
    finally:
        os.close(fd)
    assert _passed_through(m) == []
    request(m.mountpoint, {"op": "clear"})
    fd = os.open(m.mountpoint / "data", os.O_RDONLY)  # no rule again: passed through again
    try:
        assert os.pread(fd, 6, 0) == b"during"
        assert _passed_through(m) == ["data"]
    finally:
        os.close(fd)


@needs_compiled
def test_a_storage_fault_that_would_miss_a_passed_through_file_is_refused_and_cleared(
    faultfs: MakeMount,
) -> None:
    m = faultfs(separate=True, passthrough=True)
    (m.source / "data").write_bytes(b"x")
    held = os.open(m.mountpoint / "data", os.O_RDWR)
    try:
        fault = StorageFault("disk-fault", "127.0.0.1:1", m.mountpoint,
                             Rule(errno="EIO", operations=("write",)), None)  # fmt: skip
        with pytest.raises(InjectionError, match="passes data straight to the disk"):
            fault.inject()
        assert request(m.mountpoint, {"op": "status"})["rules"] == {}
        elsewhere = Rule(errno="EIO", operations=("write",), path="journal/*")
        journal = StorageFault("disk-fault", "127.0.0.1:1", m.mountpoint, elsewhere, None)
        journal.inject()
        assert journal.verify(1.0)
        journal.revert()
    finally:
        os.close(held)


@needs_compiled
def test_new_files_are_passed_through_and_counted_nowhere(faultfs: MakeMount) -> None:
    m = faultfs(separate=True, passthrough=True)
    fd = os.open(m.mountpoint / "new", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        assert _passed_through(m) == ["new"]
        os.write(fd, b"abc")
    finally:
        os.close(fd)
    assert (m.source / "new").read_bytes() == b"abc"
    assert "write" not in request(m.mountpoint, {"op": "status"})["counters"]


@needs_compiled
def test_no_passthrough_where_unsynced_writes_are_tracked(faultfs: MakeMount) -> None:
    m = faultfs(separate=True, passthrough=True, track_unsynced=True)
    assert request(m.mountpoint, {"op": "ping"})["passthrough"] is False
    fd = os.open(m.mountpoint / "f", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"lost")
        assert _passed_through(m) == []
        assert request(m.mountpoint, {"op": "status"})["unsynced"] == {"f": -1}
    finally:
        os.close(fd)


@needs_compiled
def test_read_rules_reach_pages_the_kernel_has_cached(faultfs: MakeMount) -> None:
    """A page read before a rule was set sits in the kernel's page cache; a read rule must
    still fault the next read of it through the same descriptor, and every read after."""
    m = faultfs(separate=True)
    (m.source / "data").write_bytes(b"cached" * 1000)
    fd = os.open(m.mountpoint / "data", os.O_RDONLY)
    try:
        assert os.pread(fd, 6, 0) == b"cached"  # now in the page cache
        set_rule(m, "slow", latency_s=0.05, operations=["read"])
        for _ in range(3):  # each read, not only the first after the rule
            started = time.monotonic()
            assert os.pread(fd, 6, 0) == b"cached"
            assert time.monotonic() - started >= 0.045
        set_rule(m, "slow", errno="EIO", operations=["read"])
        with pytest.raises(OSError) as failed:
            os.pread(fd, 6, 0)
        assert failed.value.errno == errno.EIO
        request(m.mountpoint, {"op": "clear"})
        assert os.pread(fd, 6, 0) == b"cached"
    finally:
        os.close(fd)


@needs_compiled
def test_o_direct_reaches_the_backing_file_as_o_direct(faultfs_on_disk: MakeMount) -> None:
    """O_DIRECT is honoured, not dropped: aligned reads and writes go through, and an unaligned
    one fails with EINVAL as on the plain directory (of a disk: tmpfs takes any alignment)."""
    m = faultfs_on_disk(separate=True)
    (m.source / "data").write_bytes(b"d" * 8192)
    buf = mmap.mmap(-1, 4096)  # page-aligned, as O_DIRECT wants
    buf.write(b"w" * 4096)
    for directory in (m.source, m.mountpoint):
        fd = os.open(directory / "data", os.O_RDWR | os.O_DIRECT)
        try:
            with pytest.raises(OSError) as unaligned:
                os.pread(fd, 4096, 1)
            assert unaligned.value.errno == errno.EINVAL, directory
            assert os.pwritev(fd, [buf], 4096) == 4096
            assert os.preadv(fd, [buf], 0) == 4096 and bytes(buf[:1]) == b"d"
        finally:
            os.close(fd)
        buf.seek(0)
        buf.write(b"w" * 4096)
    assert (m.source / "data").read_bytes() == b"d" * 4096 + b"w" * 4096


def test_the_python_layer_serves_where_nothing_is_built(
    faultfs: MakeMount, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(BINARY_ENV, "")  # the daemon inherits it: no compiled layer there
    m = faultfs(separate=True)
    assert request(m.mountpoint, {"op": "ping"})["layer"] == "python"
    (m.mountpoint / "f").write_bytes(b"served")
    assert (m.source / "f").read_bytes() == b"served"
    notices = [line for line in (m.state_dir / "faultfs.log").read_text().splitlines()
               if "not built" in line]  # fmt: skip
    assert len(notices) == 1 and "Python layer" in notices[0]


def test_install_without_cargo_says_so_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = importlib.util.spec_from_file_location("rsdrill_setup", ROOT / "setup.py")
    assert spec is not None and spec.loader is not None
    setup_py = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(setup_py)
    monkeypatch.setenv("PATH", "/nonexistent")
    assert setup_py._rust_extensions() == []
    notice = capsys.readouterr().err.splitlines()
    assert len(notice) == 1 and "cargo" in notice[0] and "Python layer" in notice[0]
