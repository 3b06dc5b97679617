"""host-freeze: the host stops (SIGSTOP, pod failure, VM suspend) for `duration`, then resumes."""

from __future__ import annotations

from typing import ClassVar, Literal

from rsdrill import registry
from rsdrill.faults.base import FaultBase
from rsdrill.faults.spec import KindSpec
from rsdrill.fields import format_duration


class HostFreezeFault(FaultBase):
    SPEC: ClassVar[KindSpec] = KindSpec(
        "host-freeze",
        "the host freezes (SIGSTOP, pod failure, VM suspend) for `duration`",
        needs_duration=True,
        sharded="members and routers",
    )

    kind: Literal["host-freeze"]

    def plan_words(self, platform: str) -> str:
        how = "SIGSTOP" if registry.on_this_machine(platform) else f"{platform}: freeze"
        return f"{how} for {format_duration(self.duration or 0.0)}"

    def plan_revert_words(self, platform: str, them: str) -> str:
        return f"resume {them}" + (" (SIGCONT)" if registry.on_this_machine(platform) else "")
