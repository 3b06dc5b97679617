"""`platform: ec2`: the target section, per-fault options and supported faults."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rsdrill.experiment.fields import FieldProblem, Strict

if TYPE_CHECKING:
    from rsdrill.experiment.schema import Experiment


class Ec2Platform(Strict):
    """Where the ec2 replica set is and how its members map to platform objects."""


class Ec2Fault(Strict):
    """Options of one fault on ec2."""


def check_experiment(exp: Experiment) -> None:
    """Refuse faults this platform cannot inject (not yet implemented: none can)."""
    for i, fault in enumerate(exp.faults):
        if fault.kind != "stepdown":
            raise FieldProblem(("faults", i, "kind"), f"{fault.kind} is not available on ec2 yet")
