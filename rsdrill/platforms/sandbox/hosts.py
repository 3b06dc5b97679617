"""The sandbox's member processes as injectors act on them, and what building one needs."""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from typing import Any

from rsdrill.experiment.schema import Target
from rsdrill.platforms.base import TargetError
from rsdrill.platforms.machine.network import rejoin_partition
from rsdrill.sandbox.cluster import Sandbox, SandboxError, port_free
from rsdrill.sandbox.config import MemberSpec, Settings


class SandboxHosts:
    """Member processes of a sandbox, addressed by host:port."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox

    def pid(self, host: str) -> int | None:
        return self.sandbox.pid(self.sandbox.spec.member(host))

    def kill(self, host: str) -> int:
        return self._do(self.sandbox.kill, host)

    def stop(self, host: str) -> int:
        return self._do(self.sandbox.stop, host)

    def cont(self, host: str) -> int:
        return self._do(self.sandbox.cont, host)

    def start(self, host: str, *, wipe: bool, boot_s: float = 0.0) -> None:
        """Restart the member unless it already runs (so a revert can be repeated)."""
        member = self.sandbox.spec.member(host)
        if self.sandbox.pid(member) is None:
            pid = self._do(lambda m: self.sandbox.start(m, wipe=wipe, boot_s=boot_s), host)
            rejoin_partition(pid, member.port)

    def wipe(self, host: str) -> None:
        try:
            self.sandbox.wipe(self.sandbox.spec.member(host))
        except SandboxError as exc:
            raise TargetError(str(exc)) from exc

    def _do(self, operation: Callable[[MemberSpec], int], host: str) -> int:
        try:
            return operation(self.sandbox.spec.member(host))
        except SandboxError as exc:
            raise TargetError(str(exc)) from exc

    def restart_action(self, host: str, *, wipe: bool) -> dict[str, object]:
        """The journal record that lets `rsdrill recover` restart this member."""
        return {
            "action": "sandbox-start",
            "dir": str(self.sandbox.directory),
            "host": host,
            "wipe": wipe,
        }


def free_port_base(count: int) -> int:
    """A base port with `count` consecutive bindable ports below the ephemeral range, within
    RSDRILL_PORT_RANGE (`LOW-HIGH`) when it is set, so jobs sharing a machine can keep apart."""
    low, high = 20000, 32000
    given = os.environ.get("RSDRILL_PORT_RANGE", "")
    if given:
        try:
            low, high = (int(part) for part in given.split("-", 1))
        except ValueError:
            raise TargetError(f"RSDRILL_PORT_RANGE={given!r}: write LOW-HIGH") from None
    for _ in range(500):
        base = random.randrange(low, high - count)
        if all(port_free("127.0.0.1", p) for p in range(base, base + count)):
            return base
    raise TargetError(f"no {count} consecutive free ports between {low} and {high}")


def settings_of(config: Target) -> Settings:
    """The replica-set settings a target's file gives (the rest: the sandbox's defaults)."""
    given: dict[str, Any] = {
        "election_timeout_ms": _ms(config.election_timeout),
        "heartbeat_interval_ms": _ms(config.heartbeat_interval),
        "heartbeat_timeout_s": config.heartbeat_timeout,
    }
    return Settings(**{k: v for k, v in given.items() if v is not None})


def _ms(seconds: float | None) -> int | None:
    return None if seconds is None else round(seconds * 1000)
