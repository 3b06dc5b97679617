"""LocalHosts.is_up: up, down, or neither (a process holding the port without answering);
LocalHosts.start failing as soon as its command has exited non-zero, with what it wrote."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from rsdrill.connection import ConnectOptions
from rsdrill.experiment.target import LocalMember
from rsdrill.platforms.base import TargetError
from rsdrill.platforms.machine import local_hosts
from rsdrill.platforms.machine.local_hosts import LocalHosts


def _hosts(host: str, tmp_path: Path, start: str = "true") -> LocalHosts:
    member = LocalMember(host=host, start=start, dbpath=str(tmp_path))
    return LocalHosts((member,), tmp_path / "logs", ConnectOptions())


def _free_host() -> str:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{free.getsockname()[1]}"


def _failed_start(tmp_path: Path, script: str) -> tuple[str, str]:
    """The member (nothing at its address) whose command runs `script`, and the error of
    starting it: within seconds, not the minute a member is given to answer."""
    host = _free_host()
    began = time.monotonic()
    with pytest.raises(TargetError) as err:
        _hosts(host, tmp_path, f"sh -c '{script}'").start(host, wipe=False)
    assert time.monotonic() - began < 10
    return host, str(err.value)


def _silent(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hellos that time out rather than being refused (a frozen member, or a partition that
    drops the packets), whatever listens."""
    monkeypatch.setattr(local_hosts, "member_down", lambda *_, **__: False)
    monkeypatch.setattr(local_hosts, "answers_hello", lambda *_, **__: False)


def test_a_hello_dropped_with_nothing_listening_is_a_member_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A partition from clients drops the hello to a killed member's port instead of refusing
    it: nothing listens there, so it is started (as before), not taken for a frozen one."""
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    _silent(monkeypatch)
    assert _hosts(f"127.0.0.1:{port}", tmp_path).is_up(f"127.0.0.1:{port}") is False


def test_a_port_held_without_an_answer_is_neither_up_nor_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        host = f"127.0.0.1:{held.getsockname()[1]}"
        _silent(monkeypatch)
        hosts = _hosts(host, tmp_path)
        with pytest.raises(TargetError, match=r"holds its port but does not answer a hello"):
            hosts.is_up(host)
        (tmp_path / "f").write_text("kept")
        with pytest.raises(TargetError, match="not wiping its data"):
            hosts.wipe(host)
    assert (tmp_path / "f").read_text() == "kept"


def test_a_start_command_that_fails_says_why_at_once(tmp_path: Path) -> None:
    """Its exit status and what it wrote on stderr, in one message, as soon as it exited."""
    host, message = _failed_start(tmp_path, "echo Error parsing option: prot >&2; exit 1")
    log = tmp_path / "logs" / f"{host.replace(':', '_')}.log"
    assert message == (
        f"{host}: its start command `sh -c 'echo Error parsing option: prot >&2; exit 1'` "
        f"exited with status 1 before the member answered a hello (output in {log}):\n"
        "    Error parsing option: prot"
    )


def test_a_failed_starts_output_is_quoted_with_passwords_masked(tmp_path: Path) -> None:
    _, message = _failed_start(tmp_path, "echo cannot reach mongodb://u:S3cretPw@db1/ >&2; exit 2")
    assert "S3cretPw" not in message  # neither in the command quoted nor in its output
    assert message.endswith("\n    cannot reach mongodb://u:***@db1/")


def test_a_failed_starts_quote_is_its_own_last_lines_and_mongods_error(tmp_path: Path) -> None:
    """Only what this start wrote (the log keeps earlier ones'), its last lines, and mongod's
    error line that a shutdown's chatter pushed out of them."""
    (tmp_path / "logs").mkdir()
    error = '{"s":"E","msg":"Error setting up listener","errmsg":"Address already in use"}'
    (tmp_path / "error").write_text(error + "\n")
    chatter = "for i in $(seq 300); do echo shutting down step $i; done"
    host = _free_host()
    hosts = _hosts(host, tmp_path, f"sh -c 'cat {tmp_path / 'error'}; {chatter}; exit 48'")
    (tmp_path / "logs" / f"{host.replace(':', '_')}.log").write_text("an earlier start\n")
    with pytest.raises(TargetError) as err:
        hosts.start(host, wipe=False)
    assert "exited with status 48" in str(err.value)
    quoted = str(err.value).split(":\n", 1)[1].split("\n")
    last = [f"    shutting down step {i}" for i in range(291, 301)]
    assert quoted == [f"    {error}", "    ...", *last]
