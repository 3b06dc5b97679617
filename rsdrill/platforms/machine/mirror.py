"""`target.sandbox`: how the set rsdrill builds keeps its members' data (here, beside the checks
that read it, since the sandbox package builds on this one)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from rsdrill.fields import Strict

if TYPE_CHECKING:
    from rsdrill.experiment.schema import Experiment, Target


class SandboxPlatform(Strict):
    """`target.sandbox`: options of the sandbox's members."""

    mirror: bool = Field(
        False,
        description="keep each member's data on two copies (replicas a and b, through faultfs), "
        "as vSAN with FTT=1 keeps two copies of each component: a disk-fault with `replica` "
        "fails one copy, which the other masks; reverted, the copy is resynced in the background",
    )


def mirrored(target: Target) -> bool:
    """The sandbox keeps each member's data on two copies (`target.sandbox.mirror`)."""
    section = target.section("sandbox", SandboxPlatform)
    return section is not None and section.mirror


def plan_details(exp: Experiment) -> list[str]:
    if mirrored(exp.target):
        return ["each member's data on two copies (replicas a: data/, b: data-b/), mirrored "
                "through faultfs"]  # fmt: skip
    return []
