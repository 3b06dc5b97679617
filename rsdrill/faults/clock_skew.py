"""clock-skew: the member's wall clock runs off (and drifts) for `duration`."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from rsdrill.faults.base import FaultBase
from rsdrill.faults.spec import KindSpec
from rsdrill.fields import format_duration


class ClockSkewFault(FaultBase):
    SPEC: ClassVar[KindSpec] = KindSpec(
        "clock-skew",
        "the member's wall clock is `clock_offset` seconds off (and drifts `clock_drift` "
        "s/s) for `duration`: oplog and hello times, $clusterTime",
        fields_doc="`clock_offset` (seconds, may be negative), `clock_drift` (s per s)",
        needs_duration=True,
    )

    kind: Literal["clock-skew"]
    clock_offset: float = Field(
        60.0, description="clock-skew: seconds the member's clock is ahead (negative: behind)"
    )
    clock_drift: float = Field(
        0.0, ge=-0.5, le=0.5, description="clock-skew: seconds it gains per second (drift)"
    )

    def takes_member_down(self) -> bool:
        return False

    def plan_words(self, platform: str) -> str:
        side = "ahead" if self.clock_offset >= 0 else "behind"
        drift = f", drifting {self.clock_drift:+g} s/s" if self.clock_drift else ""
        return self.lasting(
            f"set its clock {format_duration(abs(self.clock_offset))} {side}{drift}"
        )

    def plan_revert_words(self, platform: str, them: str) -> str:
        return f"set the clock right on {them}"
