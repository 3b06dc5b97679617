"""Giving up an owed revert (rsdrill/engine/forget.py, `rsdrill recover --forget KEY`) against
journals on disk: the revert is journaled as forgotten (by whom, when), never deleted, and is
no longer owed; unknown, ambiguous and live-run keys are refused with nothing written."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rsdrill.cli.app import app
from rsdrill.engine.forget import ForgetRefused, find, forget, settled, unknown
from rsdrill.engine.journal import Journal, pending, read_records

HOST = "10.0.0.5:27017"
KEY = f"fault:0:{HOST}"
OFF = {"action": "fail-command-off", "host": HOST}
SANDBOX_DOWN = {"action": "sandbox-down", "directory": "/nowhere"}


@pytest.fixture(scope="module")
def dead_pid() -> int:
    """The pid of a process that has exited and been reaped: a run killed outright."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def _journal(directory: Path, run: str, pid: int | None, *owed: tuple[str, dict[str, Any]]
             ) -> Path:  # fmt: skip
    """A run's journal as the runner leaves it when killed: each fault intended and applied."""
    journal = Journal(directory / f"{run}.jsonl")
    journal.write("run", run=run, experiment="nightly", pid=pid)
    for key, action in owed:
        kind = "resource" if key.startswith("resource:") else "intent"
        journal.write(kind, key=key, revert=action)
        if kind == "intent":
            journal.write("applied", key=key)
    journal.close()
    return journal.path


def test_a_forgotten_revert_is_no_longer_owed_and_stays_on_record(
    tmp_path: Path, dead_pid: int
) -> None:
    path = _journal(tmp_path, "r1", dead_pid, (KEY, OFF))
    owed = find(KEY, pending(tmp_path))
    assert owed is not None and owed.action == OFF
    assert forget(owed, "alice@ops1") == []
    assert pending(tmp_path) == []  # ended: recover passes it by
    records = read_records(path)
    assert [r["type"] for r in records] == ["run", "intent", "applied", "forgotten", "end"]
    given_up = records[3]
    assert given_up["key"] == KEY and given_up["by"] == "alice@ops1" and given_up["at"]
    assert records[-1]["verdict"] == "forgotten"
    assert records[1]["revert"] == OFF  # what was given up is still there to read


def test_forgetting_one_leaves_the_rest_owed(tmp_path: Path, dead_pid: int) -> None:
    other = f"fault:1:{HOST}"
    _journal(tmp_path, "r1", dead_pid, ("resource:target", SANDBOX_DOWN), (KEY, OFF),
             (other, OFF))  # fmt: skip
    owed = find(KEY, pending(tmp_path))
    assert owed is not None
    assert forget(owed, "alice@ops1") == [other, "resource:target"]
    (left,) = pending(tmp_path)
    assert [key for key, _ in left.actions] == [other, "resource:target"]


def test_a_key_two_runs_owe_is_named_by_its_run(tmp_path: Path, dead_pid: int) -> None:
    """Every run of the same experiment journals the same keys."""
    _journal(tmp_path, "r1", dead_pid, (KEY, OFF))
    _journal(tmp_path, "r2", dead_pid, (KEY, OFF))
    with pytest.raises(ForgetRefused) as refused:
        find(KEY, pending(tmp_path))
    assert str(refused.value) == f"--forget {KEY}: owed by 2 runs; name one: r1/{KEY}, r2/{KEY}"
    owed = find(f"r2/{KEY}", pending(tmp_path))
    assert owed is not None and owed.pending.run == "r2"
    forget(owed, "alice@ops1")
    (left,) = pending(tmp_path)
    assert left.run == "r1" and left.actions == [(KEY, OFF)]


def test_a_live_runs_revert_is_forgotten_only_with_force(tmp_path: Path) -> None:
    _journal(tmp_path, "r1", os.getpid(), (KEY, OFF))
    with pytest.raises(ForgetRefused, match=rf"run r1 is still running as pid {os.getpid()}"):
        find(KEY, pending(tmp_path))
    assert find(KEY, pending(tmp_path), force=True) is not None


def test_an_unknown_key_names_what_is_owed(tmp_path: Path, dead_pid: int) -> None:
    assert find("fault:9:x:1", pending(tmp_path)) is None
    assert unknown("fault:9:x:1", pending(tmp_path), tmp_path) == (
        f"--forget fault:9:x:1: no such revert owed: nothing is owed (journals in {tmp_path})"
    )
    _journal(tmp_path, "r1", dead_pid, (KEY, OFF), ("resource:target", SANDBOX_DOWN))
    _journal(tmp_path, "r2", dead_pid, (KEY, OFF))
    assert unknown("fault:9:x:1", pending(tmp_path)) == (
        f"--forget fault:9:x:1: no such revert owed; owed: r1/{KEY}, "
        f"resource:target (run r1), r2/{KEY}"
    )


def test_settled_says_how_a_key_stopped_being_owed(tmp_path: Path, dead_pid: int) -> None:
    path = _journal(tmp_path, "r1", dead_pid, (KEY, OFF), (f"fault:1:{HOST}", OFF))
    assert settled(KEY, tmp_path) is None  # owed, not settled
    journal = Journal(path)
    journal.write("reverted", key=f"fault:1:{HOST}")
    journal.close()
    owed = find(KEY, pending(tmp_path))
    assert owed is not None
    forget(owed, "alice@ops1")
    forgotten = settled(KEY, tmp_path)
    assert forgotten is not None
    assert forgotten.startswith(f"{KEY} (run r1): already forgotten by alice@ops1 at 20")
    reverted = settled(f"r1/fault:1:{HOST}", tmp_path)
    assert reverted is not None and reverted.startswith(
        f"fault:1:{HOST} (run r1): already reverted at"
    )
    assert settled("fault:9:x:1", tmp_path) is None


# -- through the command line --------------------------------------------------------------------


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RSDRILL_HOME", str(tmp_path))
    return tmp_path / "journal"


def _recover(*args: str) -> tuple[int, str, str]:
    done = CliRunner().invoke(app, ["recover", *args])
    return done.exit_code, done.stdout, done.stderr


def test_recover_dry_run_shows_the_key_to_forget(home: Path, dead_pid: int) -> None:
    _journal(home, "r1", dead_pid, (KEY, OFF))
    status, out, _ = _recover("--dry-run")
    assert status == 0
    assert f"  [{KEY}] would fail-command-off (host={HOST})" in out.splitlines()


def test_recover_forget_refusals_change_nothing(home: Path, dead_pid: int) -> None:
    path = _journal(home, "r1", dead_pid, (KEY, OFF))
    before = path.read_bytes()
    status, out, err = _recover("--forget", "fault:0:typo:1")
    assert (status, out) == (2, "")
    assert err == f"--forget fault:0:typo:1: no such revert owed; owed: {KEY} (run r1)\n"
    status, out, err = _recover("--forget", KEY, "--dry-run")
    assert status == 0 and err == ""
    assert out == f"r1 (nightly):\n  would forget [{KEY}] fail-command-off (host={HOST}): " \
        "not reverted, no longer owed\n"  # fmt: skip
    assert path.read_bytes() == before


def test_recover_forget_journals_it_and_recover_is_green_again(home: Path, dead_pid: int) -> None:
    path = _journal(home, "r1", dead_pid, (KEY, OFF))
    status, out, err = _recover("--forget", KEY)
    assert status == 0, out + err
    assert f"forgot [{KEY}] fail-command-off (host={HOST}): not reverted" in out
    given_up = next(r for r in read_records(path) if r["type"] == "forgotten")
    assert given_up["by"].split("@")[0] and given_up["by"] in out
    assert _recover()[:2] == (0, f"nothing to recover (journals in {home})\n")
    # Idempotent: the same call again finds nothing owed under the key, and says since when.
    status, out, _ = _recover("--forget", KEY)
    assert status == 0
    assert out.startswith(f"{KEY} (run r1): already forgotten by {given_up['by']} at ")
    assert out.endswith("; nothing to forget\n")
    status, _, err = _recover("--forget", "fault:0:typo:1")
    assert status == 2 and "nothing is owed" in err


def test_one_run_s_failed_revert_does_not_keep_the_next_run_s_journal_open(
    home: Path, dead_pid: int
) -> None:
    """Each journal ends on its own reverts: a run fully reverted gets its `end` even when an
    older run's revert failed in the same call (before, the flag was the call's)."""
    with socket.socket() as hung, socket.socket() as gone:
        hung.bind(("127.0.0.1", 0))
        hung.listen()  # the kernel takes the connection; nobody answers the hello: not down
        gone.bind(("127.0.0.1", 0))  # bound, not listening: refused, the member is down
        stuck = _journal(home, "a1", dead_pid,
                         (KEY, {**OFF, "host": f"127.0.0.1:{hung.getsockname()[1]}"}))  # fmt: skip
        done = _journal(home, "b2", dead_pid,
                        (KEY, {**OFF, "host": f"127.0.0.1:{gone.getsockname()[1]}"}))  # fmt: skip
        status, out, err = _recover()
    assert status == 4, out + err
    assert "FAILED" in err
    assert [r["type"] for r in read_records(done)][-1] == "end", out + err
    assert [r["type"] for r in read_records(stuck)][-1] != "end"
    assert [p.run for p in pending(home)] == ["a1"]
