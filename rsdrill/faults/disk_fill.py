"""disk-fill: the member's data disk filled for `duration`, then freed."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from rsdrill.faults.base import FaultBase
from rsdrill.faults.spec import KindSpec


class DiskFillFault(FaultBase):
    SPEC: ClassVar[KindSpec] = KindSpec(
        "disk-fill",
        "the member's data disk filled to `fill_percent` for `duration`, then freed (full: "
        "it dies of ENOSPC as mongod does, and is restarted)",
        fields_doc="`fill_percent` (default 100: ENOSPC)",
        needs_duration=True,
    )

    kind: Literal["disk-fill"]
    fill_percent: float = Field(
        100.0, gt=0, le=100, description="disk-fill: how full the member's data disk gets"
    )

    def takes_member_down(self) -> bool:
        return self.fill_percent >= 100  # full: ENOSPC ends the member

    def plan_words(self, platform: str) -> str:
        return self.lasting(f"fill its data disk to {self.fill_percent:g}%")

    def plan_revert_words(self, platform: str, them: str) -> str:
        return f"free the disk on {them}"
