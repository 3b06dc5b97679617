"""Faults on member processes of this machine (`platform: sandbox` and `platform: local`):
host-kill (SIGKILL, later a restart on the kept or a wiped data directory) and host-freeze
(SIGSTOP, later SIGCONT)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from rsdrill.connection import answers_hello
from rsdrill.faults.host_kill import ha_detail
from rsdrill.platforms.base import InjectionError, ProcessHosts, TargetError

if TYPE_CHECKING:
    from rsdrill.connection import ConnectOptions
    from rsdrill.faults import HostFreezeFault
    from rsdrill.faults.host_kill import Restart
    from rsdrill.platforms.base import MachineTarget


def _wait(condition: Any, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


class HostKill:
    """SIGKILL the member's process: a host lost without warning (no FIN, no goodbye)."""

    kind = "host-kill"

    def __init__(
        self,
        hosts: ProcessHosts,
        target: str,
        *,
        restart: bool,
        wipe: bool,
        restart_action: dict[str, Any] | None,
        ha: Restart | None = None,
    ) -> None:
        self.hosts = hosts
        self.target = target
        self.restart = restart
        self.wipe = wipe
        self._restart_action = restart_action
        # The HA model: restarted `detect` after the kill, the process boots for `boot` before
        # the member starts (the journal's restart action starts it at once: recover does not
        # wait for a boot).
        self.ha = ha

    def describe(self) -> str:
        if not self.restart:
            return f"SIGKILL {self.target}; it stays down"
        volume = "a wiped data directory (initial sync)" if self.wipe else "its kept data"
        if self.ha is not None:
            return (f"SIGKILL {self.target}; HA restarts its host {self.ha.detect:g}s later, "
                    f"which boots for {self.ha.boot:g}s before the member starts on "
                    f"{volume}")  # fmt: skip
        return f"SIGKILL {self.target}; later restart it on {volume}"

    def revert_action(self) -> dict[str, Any] | None:
        return self._restart_action if self.restart else None

    def inject(self) -> None:
        try:
            self.hosts.kill(self.target)
        except (TargetError, OSError) as exc:
            raise InjectionError(f"host-kill {self.target}: {exc}") from exc

    def verify(self, timeout_s: float) -> bool:
        return _wait(lambda: self.hosts.pid(self.target) is None, timeout_s)

    def revert(self) -> None:
        boot_s = self.ha.boot if self.ha is not None else 0.0
        try:
            self.hosts.start(self.target, wipe=self.wipe, boot_s=boot_s)
        except (TargetError, OSError) as exc:
            reason = str(exc).removeprefix(f"{self.target}: ")  # the member is named once
            raise InjectionError(f"restart {self.target}: {reason}") from exc

    def report(self) -> dict[str, Any]:
        """For the result: the HA model's figures (the analysis adds the measured phases)."""
        if self.ha is None:
            return {}
        return {"ha": ha_detail(self.ha, boot_waited=True)}


class HostFreeze:
    """SIGSTOP the member's process: a frozen host keeps its sockets open and answers nothing."""

    kind = "host-freeze"

    def __init__(self, hosts: ProcessHosts, target: str, options: ConnectOptions) -> None:
        self.hosts = hosts
        self.target = target
        self.options = options
        self.pid: int | None = hosts.pid(target)

    def describe(self) -> str:
        return f"SIGSTOP {self.target}; later SIGCONT"

    def revert_action(self) -> dict[str, Any] | None:
        if self.pid is None:
            raise InjectionError(f"host-freeze {self.target}: no process found")
        return {"action": "sigcont", "pid": self.pid, "host": self.target}

    def inject(self) -> None:
        try:
            self.pid = self.hosts.stop(self.target)
        except (TargetError, OSError) as exc:
            raise InjectionError(f"host-freeze {self.target}: {exc}") from exc

    def verify(self, timeout_s: float) -> bool:
        return _wait(
            lambda: not answers_hello(self.target, timeout_s=0.2, options=self.options), timeout_s
        )

    def revert(self) -> None:
        try:
            self.hosts.cont(self.target)
        except (TargetError, OSError) as exc:
            raise InjectionError(f"SIGCONT {self.target}: {exc}") from exc


def host_freeze(target: MachineTarget, fault: HostFreezeFault, host: str) -> HostFreeze:
    """host-freeze on a member process: SIGSTOP, then SIGCONT."""
    return HostFreeze(target.hosts, host, target.connect_options)
