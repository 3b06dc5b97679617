"""Members forked from the zygote (rsdrill/sandbox/zygote.py) are the processes `python -m
rsdrill_emulator` would be: found by their port, alone in their session, gone when killed;
where the zygote cannot serve a start, the member is started as before."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from bson.timestamp import Timestamp
from pymongo import MongoClient

from rsdrill.procstat import stat_fields
from rsdrill.sandbox import zygote
from rsdrill.sandbox.cluster import Sandbox, process_state
from rsdrill.sandbox.config import IGNORE_AFTER_CLUSTER_TIME_ENV, MemberSpec
from tests.harness.members import member_state, wait_until


def _parent(pid: int) -> int:
    fields = stat_fields(pid)
    assert fields is not None, f"no process {pid}"
    return int(fields[1])


def _cmdline(pid: int) -> list[bytes]:
    return [a for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]


def _restarted_with(
    replset: Callable[..., Sandbox], monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> tuple[MemberSpec, int]:
    """An rs1's member killed and started again with `name=value` set; the member and its pid."""
    sandbox = replset("rs1")
    (member,) = sandbox.spec.members
    sandbox.kill(member)
    monkeypatch.setenv(name, value)
    sandbox.start(member)
    pid = sandbox.pid(member)
    assert pid is not None
    return member, pid


def test_a_forked_member_is_the_process_exec_would_start(
    replset: Callable[..., Sandbox],
) -> None:
    sandbox = replset("rs1")
    (member,) = sandbox.spec.members
    pid = sandbox.pid(member)
    assert pid is not None and member_state(member.host) == "PRIMARY"
    forked_from = _parent(pid)
    assert forked_from != os.getpid()  # the zygote's child, not ours
    assert b"rsdrill_emulator.zygote" in b" ".join(_cmdline(forked_from))
    assert _cmdline(pid) == [
        os.fsencode(a) for a in sandbox.engine.argv(sandbox, member, init=True)
    ]
    assert Path(f"/proc/{pid}/comm").read_text().strip() == "rsdrill-member"
    assert os.getsid(pid) == pid  # its own session: a SIGKILL to its group hits it alone
    assert (Path(f"/proc/{pid}/cwd")).resolve() == Path.cwd().resolve()
    sandbox.kill(member)
    # Reaped at once (nobody waits for a zombie), and the port names no process.
    wait_until(
        lambda: process_state(pid, member.port) is None and stat_fields(pid) is None,
        2.0,
        f"killed member {pid} gone, not a zombie",
    )
    sandbox.start(member)
    again = sandbox.pid(member)
    assert again is not None and again != pid and _parent(again) == forked_from


def test_a_forked_member_runs_in_the_environment_of_its_start(
    replset: Callable[..., Sandbox], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A planted switch set after the zygote started: a read after a cluster time ahead of the
    # member's returns at once, where a correct member writes a no-op past that time first.
    member, pid = _restarted_with(replset, monkeypatch, IGNORE_AFTER_CLUSTER_TIME_ENV, "1")
    assert _parent(pid) != os.getpid()  # forked all the same
    ahead = Timestamp(int(time.time()) + 30, 1)
    with MongoClient(member.host, directConnection=True) as client:
        client.db.command("find", "c", readConcern={"afterClusterTime": ahead}, maxTimeMS=2000)
        last_write = client.admin.command("hello")["lastWrite"]["opTime"]["ts"]
    assert last_write < ahead, "the member ran without the switch set when it started"


def test_a_variable_python_reads_as_it_starts_is_given_by_exec(
    replset: Callable[..., Sandbox], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, pid = _restarted_with(replset, monkeypatch, "PYTHONWARNINGS", "error::ResourceWarning")
    assert _parent(pid) == os.getpid()
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    assert b"PYTHONWARNINGS=error::ResourceWarning" in environ


def test_a_killed_zygote_is_replaced_and_its_members_live_on(
    replset: Callable[..., Sandbox],
) -> None:
    sandbox = replset("rs3")
    first, second, _ = sandbox.spec.members
    old_zygote = _parent(sandbox.pid(second) or 0)
    sandbox.kill(first)
    os.kill(old_zygote, signal.SIGKILL)
    sandbox.start(first)  # the dead zygote noticed, a new one started
    pid = sandbox.pid(first)
    assert pid is not None and _parent(pid) not in (old_zygote, os.getpid())
    assert member_state(second.host) in ("PRIMARY", "SECONDARY")


def test_only_this_interpreters_emulator_commands_are_forked(tmp_path: Path) -> None:
    log = tmp_path / "member.log"
    assert zygote.fork_member(["sh", "-c", "sleep 1"], log) is None
    assert zygote.fork_member(["/usr/bin/python3", "-m", "rsdrill_emulator"], log) is None
