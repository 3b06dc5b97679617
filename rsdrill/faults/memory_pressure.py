"""memory-pressure: the member may allocate only a little more for `duration` (then OOM)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from rsdrill.faults.base import FaultBase
from rsdrill.faults.spec import KindSpec


class MemoryPressureFault(FaultBase):
    SPEC: ClassVar[KindSpec] = KindSpec(
        "memory-pressure",
        "the member may allocate only `memory_limit_mb` more for `duration`: beyond it "
        "the OOM killer takes it (a host out of memory); restarted on revert",
        fields_doc="`memory_limit_mb` (default 1: the OOM killer at once)",
        needs_duration=True,
    )

    kind: Literal["memory-pressure"]
    memory_limit_mb: float = Field(
        1.0, gt=0, description="memory-pressure: how much more the member may allocate"
    )

    def plan_words(self, platform: str) -> str:
        return self.lasting(f"let it allocate only {self.memory_limit_mb:g} MB more")

    def plan_revert_words(self, platform: str, them: str) -> str:
        return f"lift the memory limit on {them}"
