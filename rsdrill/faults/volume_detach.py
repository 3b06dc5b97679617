"""volume-detach: the data volume vanishes for `duration` (every I/O fails), then comes back."""

from __future__ import annotations

from typing import ClassVar, Literal

from rsdrill.faults.base import FaultBase
from rsdrill.faults.spec import KindSpec, LocalTool


class VolumeDetachFault(FaultBase):
    SPEC: ClassVar[KindSpec] = KindSpec(
        "volume-detach",
        "the data volume vanishes for `duration` (every I/O fails), then comes back",
        needs_duration=True,
    )

    kind: Literal["volume-detach"]

    def local_tools(self) -> tuple[LocalTool, ...]:
        return ("fuse",)

    def plan_words(self, platform: str) -> str:
        return self.lasting("detach its data volume")

    def plan_revert_words(self, platform: str, them: str) -> str:
        return f"re-attach the volume on {them}"
