"""`rsdrill recover` and `rsdrill recover --forget KEY` run at once on one journal (two operators,
a nightly job's recover while someone forgets a key): each holds the journal's lock (flock on
the journal file) from its read to its last record, so the second waits for the first and
then decides from what the first wrote, or is refused (exit 2, one line, nothing done). Before,
both decided from what they had read: the fault reverted twice and two `end` records, a revert
carried out for a key just forgotten, a key forgotten after it was reverted.

Real `rsdrill recover` processes on a real journal; the member is a loopback server standing in
for mongod, which answers `hello`, counts each `configureFailPoint` (each revert that reached
it) and holds its reply while the test says (a revert in progress)."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import signal
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rsdrill import wire
from rsdrill.cli.app import app
from rsdrill.engine.journal import Journal, journal_paths, pending, read_records
from tests.harness.cli import Rsdrill

HELLO = {"ok": 1.0, "isWritablePrimary": True, "maxWireVersion": 21, "minWireVersion": 0}
HELD_AT_MOST_S = 4.0  # under fail_command's 5 s: a reply held longer is a revert failed
WAITING = "another rsdrill recover holds it; waiting up to"


class Member:
    """A member at a loopback port: every `configureFailPoint` is counted, and answered once
    `release` is set (at most HELD_AT_MOST_S later)."""

    def __init__(self) -> None:
        self.fail_points: list[Any] = []  # each configureFailPoint's mode, as it arrived
        self.release = threading.Event()
        self._stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self.host = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        buffer = b""
        conn.settimeout(0.2)
        with conn:
            while not self._stop.is_set():
                try:
                    chunk = conn.recv(65536)
                except TimeoutError:
                    continue
                except OSError:
                    return
                if not chunk:
                    return
                buffer += chunk
                while len(buffer) >= 16 and len(buffer) >= struct.unpack("<i", buffer[:4])[0]:
                    length, request_id = struct.unpack("<ii", buffer[:8])
                    body = wire.parse_op_msg(request_id, buffer[16:length]).body
                    buffer = buffer[length:]
                    name = next(iter(body)).lower()
                    if name == "configurefailpoint":
                        self.fail_points.append(body.get("mode"))
                        self.release.wait(HELD_AT_MOST_S)
                    reply = HELLO if name in ("hello", "ismaster") else {"ok": 1.0}
                    conn.sendall(wire.encode_op_msg(1, request_id, reply))

    def close(self) -> None:
        self._stop.set()
        self.release.set()
        self._thread.join(2)
        self._listener.close()


@pytest.fixture
def members() -> Iterator[list[Member]]:
    started = [Member(), Member()]
    yield started
    for member in started:
        member.close()


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture(scope="module")
def dead_pid() -> int:
    """The pid of a process that has exited and been reaped: a run killed outright."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def _key(member: Member, index: int = 0) -> str:
    return f"fault:{index}:{member.host}"


def _journal(home: Path, pid: int, *members: Member) -> Path:
    """A killed run's journal: a fail point set on each member (the last one reverted first)."""
    journal = Journal(home / "journal" / "r1.jsonl")
    journal.write("run", run="r1", experiment="nightly", pid=pid)
    for index, member in enumerate(members):
        key = _key(member, index)
        journal.write("intent", key=key, revert={"action": "fail-command-off", "host": member.host})
        journal.write("applied", key=key)
    journal.close()
    return journal.path


class Recover:
    """`rsdrill recover ARGS` in a process of its own, its output in files read as it runs."""

    def __init__(self, home: Path, name: str, *args: str) -> None:
        self._out, self._err = home.parent / f"{name}.out", home.parent / f"{name}.err"
        with self._out.open("w") as out, self._err.open("w") as err:
            self.process = Rsdrill(["recover", *args], stdout=out, stderr=err, text=True,
                                   env={**os.environ, "RSDRILL_HOME": str(home)})  # fmt: skip

    @property
    def stderr(self) -> str:
        return self._err.read_text()

    def done(self, timeout: float = 30) -> tuple[int, str, str]:
        status = self.process.wait(timeout)
        return status, self._out.read_text(), self.stderr


def _until(condition: Any, timeout: float = HELD_AT_MOST_S - 0.5) -> None:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)


def _waiting_or_done(recover: Recover) -> None:
    """Until the second caller says it waits for the lock, or is done (it did not wait)."""
    _until(lambda: WAITING in recover.stderr or recover.process.poll() is not None)


@contextmanager
def _locked(path: Path) -> Iterator[int]:
    """The journal's lock, held as another recover would hold it; its descriptor."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        yield fd
    finally:
        os.close(fd)


def _types(path: Path) -> list[str]:
    return [r["type"] for r in read_records(path)]


def test_two_recovers_at_once_revert_once_and_end_once(
    home: Path, members: list[Member], dead_pid: int
) -> None:
    member = members[0]
    path = _journal(home, dead_pid, member)
    first = Recover(home, "first")
    _until(lambda: member.fail_points)  # its revert is in progress, the lock held
    assert member.fail_points == ["off"]
    second = Recover(home, "second")
    _waiting_or_done(second)
    member.release.set()
    status, out, err = first.done()
    assert status == 0, out + err
    assert f"[{_key(member)}] {member.host}: failCommand off" in out
    status, out, err = second.done()
    assert status == 0, out + err
    assert member.fail_points == ["off"]  # reverted once
    assert _types(path) == ["run", "intent", "applied", "reverted", "end"]
    assert out == "r1 (nightly): finished meanwhile by another recover; nothing to do\n"
    assert err.startswith(f"recover: {path}: {WAITING} 10s\n")
    assert os.listdir(path.parent) == [path.name]  # the lock left no file behind


def test_a_forget_while_recover_reverts_waits_and_forgets_nothing(
    home: Path, members: list[Member], dead_pid: int
) -> None:
    """The forget's key is reverted by the recover holding the journal: it says so, exit 0,
    and journals nothing (before: `forgotten` written, the revert carried out all the same,
    and a second `end`)."""
    gone, busy = members  # `busy`, journaled last, is reverted first
    path = _journal(home, dead_pid, gone, busy)
    recover = Recover(home, "recover")
    _until(lambda: busy.fail_points)
    forget = Recover(home, "forget", "--forget", _key(gone, 0))
    _waiting_or_done(forget)
    busy.release.set()
    gone.release.set()
    status, out, err = recover.done()
    assert status == 0, out + err
    status, out, err = forget.done()
    assert status == 0, out + err
    assert out.startswith(f"{_key(gone, 0)} (run r1): already reverted at ")
    assert out.endswith("; nothing to forget\n")
    assert WAITING in err
    assert gone.fail_points == busy.fail_points == ["off"]
    assert _types(path) == ["run", "intent", "applied", "intent", "applied", "reverted",
                            "reverted", "end"]  # fmt: skip


def test_a_forget_decided_before_a_recover_wrote_writes_nothing(
    home: Path, members: list[Member], dead_pid: int
) -> None:
    """The forget read the key as owed; a recover (the test, holding the lock) reverted it and
    ended the journal before the forget could write: it reads again under the lock."""
    member = members[0]
    path = _journal(home, dead_pid, member)
    with _locked(path) as fd:
        forget = Recover(home, "forget", "--forget", _key(member))
        _waiting_or_done(forget)
        at = "2026-01-01T00:00:00+00:00"
        for record in ({"type": "reverted", "key": _key(member)}, {"type": "end"}):
            os.write(fd, (json.dumps({**record, "at": at}) + "\n").encode())
    status, out, err = forget.done()
    assert status == 0, out + err
    assert out == (f"{_key(member)} (run r1): already reverted at 2026-01-01T00:00:00+00:00; "
                   "nothing to forget\n")  # fmt: skip
    assert _types(path) == ["run", "intent", "applied", "reverted", "end"]


def test_a_recover_held_off_too_long_is_refused_with_nothing_done(
    home: Path, members: list[Member], dead_pid: int
) -> None:
    member = members[0]
    path = _journal(home, dead_pid, member)
    before = path.read_bytes()
    refusal = (f"recover: {path}: another rsdrill recover holds it (waited 0s); nothing done: "
               "run it again once that one is done, or wait longer with --lock-wait\n")  # fmt: skip
    with _locked(path):
        for args in ((), ("--forget", _key(member))):
            status, out, err = Recover(home, "refused", "--lock-wait", "0", *args).done()
            assert (status, out, err) == (2, "", refusal)
        waited = Recover(home, "waited", "--lock-wait", "0.3").done()
        assert waited[0] == 2 and waited[2].splitlines() == [
            f"recover: {path}: {WAITING} 0.3s",
            refusal.replace("0s)", "0.3s)").rstrip(),
        ]
        # A dry run writes nothing, and takes no lock: it answers at once.
        status, out, _ = Recover(home, "dry", "--dry-run", "--lock-wait", "0").done()
        assert status == 0 and f"would fail-command-off (host={member.host})" in out
    assert path.read_bytes() == before
    assert member.fail_points == []
    member.release.set()
    status, out, err = Recover(home, "after", "--lock-wait", "0").done()
    assert status == 0, out + err
    assert member.fail_points == ["off"]


def test_a_killed_recover_leaves_the_journal_unlocked(
    home: Path, members: list[Member], dead_pid: int
) -> None:
    """The kernel drops a flock with its holder: the next recover goes on at once and does
    what the killed one had not journaled as done."""
    member = members[0]
    path = _journal(home, dead_pid, member)
    killed = Recover(home, "killed")
    _until(lambda: member.fail_points)
    killed.process.send_signal(signal.SIGKILL)
    assert killed.done()[0] == -signal.SIGKILL
    member.release.set()
    status, out, err = Recover(home, "next", "--lock-wait", "0").done()
    assert status == 0, out + err
    assert member.fail_points == ["off", "off"]  # the killed one's never journaled: again
    assert _types(path) == ["run", "intent", "applied", "reverted", "end"]
    assert os.listdir(path.parent) == [path.name]


def test_a_filesystem_that_cannot_lock_does_not_stop_recover(
    home: Path, dead_pid: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An NFS mount without its lock manager (ENOLCK): recover says so and reverts as it did
    before the lock, rather than leave the faults in force."""
    with socket.socket() as gone:
        gone.bind(("127.0.0.1", 0))  # bound, not listening: the member is down
        host = f"127.0.0.1:{gone.getsockname()[1]}"
        journal = Journal(home / "journal" / "r1.jsonl")
        journal.write("run", run="r1", experiment="nightly", pid=dead_pid)
        journal.write("intent", key="fault:0", revert={"action": "fail-command-off", "host": host})
        journal.close()

        def no_locks(fd: int, operation: int) -> None:
            raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

        monkeypatch.setenv("RSDRILL_HOME", str(home))
        monkeypatch.setattr(fcntl, "flock", no_locks)
        done = CliRunner().invoke(app, ["recover"])
    assert done.exit_code == 0, done.stdout + done.stderr
    assert done.stderr == (
        f"recover: cannot lock {journal.path} ({os.strerror(errno.ENOLCK)}): going on without "
        "the lock; run no other recover on it meanwhile\n"
    )
    assert _types(journal.path) == ["run", "intent", "reverted", "end"]


def test_a_new_run_s_journal_is_never_seen_without_its_run_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found empty (created, its `run` record not written yet), a journal read as a dead run's
    with nothing owed, and `recover` ended it under the run that was starting: the faults it
    then journaled came after its `end`, and a recover after a crash passed them by."""
    seen: list[list[Path]] = []
    write = Journal.write

    def looked(journal: Journal, record_type: str, **fields: Any) -> None:
        seen.append(journal_paths(tmp_path))  # what a recover finds at that moment
        write(journal, record_type, **fields)

    monkeypatch.setattr(Journal, "write", looked)
    journal = Journal.open_run("r1", "nightly", tmp_path)
    journal.write("intent", key="fault:0", revert={"action": "fail-command-off", "host": "h:1"})
    journal.close()
    assert seen == [[], [tmp_path / "r1.jsonl"]]
    (owed,) = pending(tmp_path)
    assert (owed.run, owed.pid, owed.actions[0][0]) == ("r1", os.getpid(), "fault:0")
    assert os.listdir(tmp_path) == ["r1.jsonl"]
