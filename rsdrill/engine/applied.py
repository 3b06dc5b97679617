"""What a run has injected: each fault's record, and those in force that must be reverted."""

from __future__ import annotations

from dataclasses import dataclass, field

from rsdrill.history import FaultRecord
from rsdrill.platforms.base import Injector


@dataclass
class Applied:
    """A fault that is in force and must be reverted."""

    record: FaultRecord
    injector: Injector
    key: str


@dataclass
class RunState:
    """The faults a run has injected (its records) and those in force, to revert."""

    records: list[FaultRecord] = field(default_factory=list)
    applied: dict[str, Applied] = field(default_factory=dict)
    # When each fault's injection returned (run seconds), per fault index: what its hold
    # counts from, so that it is in force for its whole duration however long the injection
    # took (a local kill first finds the pid: over 0.1 s on a loaded machine).
    in_force_s: dict[int, list[float]] = field(default_factory=dict)

    def held_until(self, index: int, revert_after: float | None) -> float:
        """When fault `index` has been in force for its whole `revert_after`, counted from when
        its injection returned: a fault injected late or slowly (its platform's lookups, a slow
        API, the pid found before a kill) is held as long as the experiment says, not cut short
        by its lateness."""
        in_force = self.in_force_s.get(index)
        return max(in_force) + revert_after if in_force and revert_after is not None else 0.0
