"""faultfs pieces without a mount: rules, the token bucket's pacing, undo records, a mirrored
backing's degrading and resync."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from rsdrill.faultfs.bucket import TokenBucket
from rsdrill.faultfs.mirror import Backing
from rsdrill.faultfs.operations import FaultOperations
from rsdrill.faultfs.rules import Rule, RuleError
from rsdrill.faultfs.state import FaultState
from rsdrill.faultfs.undo import UndoLog


def test_rule_matching_by_operation_and_glob() -> None:
    rule = Rule(errno="EIO", operations=("write", "fsync"), path="journal/*")
    assert rule.applies_to("write", "journal/WiredTigerLog.01")
    assert not rule.applies_to("read", "journal/WiredTigerLog.01")
    assert not rule.applies_to("write", "collection-0.wt")
    assert Rule(operations=("any",)).applies_to("open", "x")
    assert Rule.from_dict(rule.to_dict()) == rule


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"errno": "EBOGUS"}, "errno"),
        ({"operations": ["delete"]}, "operations"),
        ({"probability": 1.5}, "probability"),
        ({"write_iops": 0}, "write_iops"),
        ({"latency_s": -1}, "latency_s"),
        ({"nope": 1}, "unknown rule field"),
        ({"replica": "c"}, "replica: 'c' is not one of a, b"),
        ({"replica": "a", "detach": True}, "detach acts on the whole mount"),
    ],
)
def test_rule_rejects_bad_fields_naming_them(raw: dict[str, object], message: str) -> None:
    with pytest.raises(RuleError, match=message):
        Rule.from_dict(raw)


def test_bucket_paces_to_its_rate_after_the_burst() -> None:
    bucket = TokenBucket(rate=100, burst=10)
    waits = [bucket.reserve(1) for _ in range(110)]
    assert waits[:9] == [0.0] * 9
    # The 110th op may start about 1 s after the first (10 burst + 100 at 100/s).
    assert 0.95 <= waits[-1] <= 1.05


def test_bucket_charges_a_large_request_before_it_proceeds() -> None:
    bucket = TokenBucket(rate=1000, burst=100)
    assert 0.85 <= bucket.reserve(1000) <= 0.95
    assert 1.85 <= bucket.reserve(1000) <= 1.95


def test_state_fails_detached_and_errors_by_probability() -> None:
    state = FaultState()
    assert state.admit("write", "f") is None
    state.set_rule("e", Rule(errno="ENOSPC", operations=("write",)))
    assert state.admit("write", "f") == 28
    assert state.admit("read", "f") is None
    state.set_rule("d", Rule(detach=True))
    assert state.admit("read", "f") == 5
    # Each dropped rule with its hits to the last operation: e failed the write, d the read.
    dropped = state.clear()
    assert list(dropped) == ["e", "d"]
    assert dropped["e"]["failed"] == 1 and dropped["d"]["failed"] == 1
    assert state.admit("write", "f") is None


def test_replica_rules_act_on_that_replica_only() -> None:
    state = FaultState()
    state.set_rule("a", Rule(errno="EIO", operations=("any",), replica="a"))
    assert state.admit("write", "f") is None  # the mount's own operation
    assert state.admit("write", "f", replica="b") is None
    assert state.admit("write", "f", replica="a") == 5
    assert state.replicas_named() == {"a"}
    assert state.counters["replica_a_failed_write"] == 1 and state.counters["write"] == 1


def test_a_mirror_masks_a_failed_replica_and_resyncs_it(tmp_path: Path) -> None:
    roots: dict[str | None, int] = {}
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        roots[name] = os.open(tmp_path / name, os.O_RDONLY | os.O_DIRECTORY)
    state = FaultState()
    record = tmp_path / "mirror.json"
    backing = Backing(roots, {n: str(tmp_path / str(n)) for n in roots}, state, record)
    try:
        created = os.O_CREAT | os.O_RDWR
        fh = backing.open("f", created, "open", lambda root: os.open("f", created, dir_fd=root))
        state.set_rule("fail-a", Rule(errno="EIO", operations=("write",), replica="a"))
        assert backing.write(fh, "write", "f", (0, 3), lambda fd: os.pwrite(fd, b"abc", 0)) == 3
        assert backing.snapshot()["a"]["state"] == "degraded"
        assert (tmp_path / "b" / "f").read_bytes() == b"abc"
        assert (tmp_path / "a" / "f").read_bytes() == b""
        state.clear("fail-a")
        backing.rules_changed()
        deadline = time.monotonic() + 10
        while backing.snapshot()["a"]["state"] != "in-sync" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert (tmp_path / "a" / "f").read_bytes() == b"abc"
        (resync,) = backing.snapshot()["a"]["resyncs"]
        assert resync["from"] == "b" and resync["bytes"] == 3 and resync["files"] == 1
        # Both replicas written again, through the handle opened before the failure.
        backing.write(fh, "write", "f", (0, 1), lambda fd: os.pwrite(fd, b"Z", 0))
        assert (tmp_path / "a" / "f").read_bytes() == (tmp_path / "b" / "f").read_bytes() == b"Zbc"
        assert '"in-sync"' in record.read_text()
        backing.release(fh)
    finally:
        for fd in roots.values():
            os.close(fd)


def test_undo_restores_the_synced_bytes_once_per_range(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"0123456789")
    root = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    fd = os.open(tmp_path / "f", os.O_RDWR)
    try:
        undo = UndoLog(root)
        for start, data in ((2, b"ab"), (1, b"XYZW"), (8, b"!!!!")):
            undo.before_change("f", fd, start, start + len(data))
            os.pwrite(fd, data, start)
        assert undo.pending() == {"f": 6}  # bytes 1-4 and 8-9 of the original, each once
        undo.power_loss()
        assert (tmp_path / "f").read_bytes() == b"0123456789"
    finally:
        os.close(fd)
        os.close(root)


def test_state_counts_what_each_rule_did() -> None:
    state = FaultState()
    state.set_rule("journal", Rule(errno="EIO", operations=("fsync",), path="journal/*"))
    state.set_rule("slow", Rule(operations=("read",), latency_s=0.001))
    assert state.admit("fsync", "journal/log.1") == 5
    assert state.admit("fsync", "data.wt") is None
    assert state.admit("read", "data.wt") is None
    hits = state.snapshot()["rule_hits"]
    assert hits["journal"] == {"matched": 1, "failed": 1, "slowed": 0}
    assert hits["slow"] == {"matched": 1, "failed": 0, "slowed": 1}


def test_utimens_sets_given_times_and_without_times_now(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x")
    root = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        state = FaultState()
        ops = FaultOperations(Backing({None: root}, {None: str(tmp_path)}, state), state, None)
        ops.utimens("/f", (1_000_000_000, 2_000_000_000))
        st = os.stat(tmp_path / "f")
        assert (st.st_atime_ns, st.st_mtime_ns) == (1_000_000_000, 2_000_000_000)
        before = time.time_ns()
        ops.utimens("/f", None)  # what mfusepy passes when the kernel gives no times
        assert os.stat(tmp_path / "f").st_mtime_ns >= before - 10_000_000  # coarse fs clocks
    finally:
        os.close(root)


def test_the_mirror_record_stays_readable_while_threads_save_it(tmp_path: Path) -> None:
    """The resync thread and the control thread both save the record: two writes into one
    temporary file once left a record with another's tail after its end (CI: `rsdrill recover`
    could not read it, JSONDecodeError: Extra data)."""
    roots: dict[str | None, int] = {}
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        roots[name] = os.open(tmp_path / name, os.O_RDONLY | os.O_DIRECTORY)
    record = tmp_path / "mirror.json"
    backing = Backing(roots, {n: str(tmp_path / str(n)) for n in roots}, FaultState(), record)
    try:
        replica = backing.replicas[0]
        bad: list[str] = []

        def save(n: int) -> None:
            for i in range(200):
                # Records of different lengths, as a replica's error comes and goes.
                replica.error = "x" * ((n * 37 + i * 11) % 300) or None
                try:
                    backing._save()
                    json.loads(record.read_text())
                except (OSError, ValueError) as exc:  # a torn record, or its file taken away
                    bad.append(f"{type(exc).__name__}: {exc}")

        threads = [threading.Thread(target=save, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not bad, bad[:3]
        assert json.loads(record.read_text())["replicas"].keys() == {"a", "b"}
        assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob(".*.tmp"))
    finally:
        for fd in roots.values():
            os.close(fd)
