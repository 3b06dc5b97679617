"""`target.sandbox`: how the set rsdrill builds keeps its members' data."""

from __future__ import annotations

from pydantic import Field

from rsdrill.fields import Strict


class SandboxPlatform(Strict):
    """`target.sandbox`: options of the sandbox's members."""

    mirror: bool = Field(
        False,
        description="keep each member's data on two copies (replicas a and b, through faultfs), "
        "as vSAN with FTT=1 keeps two copies of each component: a disk-fault with `replica` "
        "fails one copy, which the other masks; reverted, the copy is resynced in the background",
    )
