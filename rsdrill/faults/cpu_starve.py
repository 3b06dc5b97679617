"""cpu-starve: the member keeps a small share of one CPU for `duration` (a noisy neighbour)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from rsdrill.faults.base import FaultBase
from rsdrill.faults.spec import KindSpec


class CpuStarveFault(FaultBase):
    SPEC: ClassVar[KindSpec] = KindSpec(
        "cpu-starve",
        "the member gets `cpu_share` of one CPU for `duration` (a noisy neighbour)",
        fields_doc="`cpu_share` (of one CPU, default 0.05)",
        needs_duration=True,
    )

    kind: Literal["cpu-starve"]
    cpu_share: float = Field(
        0.05, gt=0, le=1, description="cpu-starve: the share of one CPU the member keeps"
    )

    def takes_member_down(self) -> bool:
        return False

    def plan_words(self, platform: str) -> str:
        return self.lasting(f"starve its CPU to {self.cpu_share:.0%} of one CPU")

    def plan_revert_words(self, platform: str, them: str) -> str:
        return f"end the CPU starvation on {them}"
