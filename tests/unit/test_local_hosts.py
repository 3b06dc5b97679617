"""LocalHosts.is_up: up, down, or neither (a process holding the port without answering)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from rsdrill.connection import ConnectOptions
from rsdrill.experiment.target import LocalMember
from rsdrill.platforms.base import TargetError
from rsdrill.platforms.machine import local_hosts
from rsdrill.platforms.machine.local_hosts import LocalHosts


def _hosts(host: str, tmp_path: Path) -> LocalHosts:
    member = LocalMember(host=host, start="true", dbpath=str(tmp_path))
    return LocalHosts((member,), tmp_path / "logs", ConnectOptions())


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
