"""When each fault is injected and reverted and each step runs, as seconds from the start of
the probes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rsdrill.experiment.schema import Fault, Step


@dataclass(frozen=True, order=True)
class Action:
    at_s: float
    # At the same instant a revert goes first (the earlier fault ends before the next begins),
    # a step last (it sees the faults of its moment in force), the forced reconfig after it.
    order: int
    # The fault's index, or the step's for a step (0 for the forced reconfig).
    index: int
    what: Literal["inject", "revert", "step", "recover"]


def build_schedule(
    faults: tuple[Fault, ...] | list[Fault],
    steps: tuple[Step, ...] | list[Step] = (),
    recover_at_s: float | None = None,
) -> list[Action]:
    """Every inject, revert and step in time order (faults may overlap), and the forced
    reconfig of `recovery:` when due."""
    actions = []
    for i, fault in enumerate(faults):
        actions.append(Action(fault.at, 1, i, "inject"))
        if fault.revert_after is not None:
            actions.append(Action(fault.at + fault.revert_after, 0, i, "revert"))
    actions += [Action(step.at, 2, i, "step") for i, step in enumerate(steps)]
    if recover_at_s is not None:
        actions.append(Action(recover_at_s, 3, 0, "recover"))
    return sorted(actions)
