"""When each fault is injected and reverted, as seconds from the start of the probes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rsdrill.experiment.schema import Fault


@dataclass(frozen=True, order=True)
class Action:
    at_s: float
    # At the same instant a revert goes first: the earlier fault ends before the next begins.
    order: int
    index: int
    what: Literal["inject", "revert"]


def build_schedule(faults: tuple[Fault, ...] | list[Fault]) -> list[Action]:
    """Every inject and revert in time order (faults may overlap)."""
    actions = []
    for i, fault in enumerate(faults):
        actions.append(Action(fault.at, 1, i, "inject"))
        if fault.revert_after is not None:
            actions.append(Action(fault.at + fault.revert_after, 0, i, "revert"))
    return sorted(actions)
