"""`data-loss`: a member's host and its data are gone for good, as in a disaster. Nothing
reverts it: the experiment's restore step (the user's own backup restore) brings the set
back, and the drill times that (RTO) and counts what the backup did not hold (RPO)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from rsdrill.platforms.base import InjectionError, ProcessHosts, TargetError

if TYPE_CHECKING:
    from rsdrill.faults import DataLossFault
    from rsdrill.platforms.base import MachineTarget

GONE_TIMEOUT_S = 10.0


class DataLoss:
    """SIGKILL the member, then empty its data directory; it is not restarted."""

    kind = "data-loss"

    def __init__(self, hosts: ProcessHosts, target: str) -> None:
        self.hosts = hosts
        self.target = target

    def describe(self) -> str:
        return f"SIGKILL {self.target} and empty its data directory; a restore step brings it back"

    def revert_action(self) -> dict[str, Any] | None:
        return None  # lost data cannot be put back by rsdrill: that is the restore's job

    def inject(self) -> None:
        try:
            if self.hosts.pid(self.target) is not None:
                self.hosts.kill(self.target)
            deadline = time.monotonic() + GONE_TIMEOUT_S
            while self.hosts.pid(self.target) is not None:
                if time.monotonic() > deadline:
                    raise InjectionError(f"data-loss {self.target}: the process did not exit")
                time.sleep(0.01)
            self.hosts.wipe(self.target)
        except (TargetError, OSError) as exc:
            raise InjectionError(f"data-loss {self.target}: {exc}") from exc

    def verify(self, timeout_s: float) -> bool:
        return self.hosts.pid(self.target) is None

    def revert(self) -> None:
        """Nothing: the restore step is the way back (`revert_action` is None, so the runner
        never calls this)."""


def data_loss(target: MachineTarget, fault: DataLossFault, host: str) -> DataLoss:
    """data-loss on a member process: SIGKILL and its data directory emptied."""
    return DataLoss(target.hosts, host)
