"""stepdown: `replSetStepDown` on the primary, the same on every platform."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from rsdrill.faults.base import FaultBase
from rsdrill.faults.spec import KindSpec, Way
from rsdrill.fields import Duration, FieldProblem
from rsdrill.fields import format_duration as _secs

DEFAULT_STEPDOWN_S = 60.0
"""replSetStepDown's period when the fault gives no `duration` (MongoDB's default)."""


class StepdownFault(FaultBase):
    SPEC: ClassVar[KindSpec] = KindSpec(
        "stepdown",
        "`replSetStepDown` on the primary (any platform)",
        fields_doc="`duration` (the stepdown period), `secondary_catch_up`, `force`",
        reverted=False,
        way=Way("replSetStepDown"),
        server_privileges=(("replSetStateChange", "clusterManager"),),
        drawn={"secondary_catch_up": 1.0},
        replica_set_only="a standalone server has no primary to step down",
        sharded="members",
    )

    kind: Literal["stepdown"]
    secondary_catch_up: Duration = Field(10.0, description="stepdown: secondaryCatchUpPeriodSecs")
    force: bool = Field(False, description="stepdown: step down even without a caught-up heir")

    def check(self) -> None:
        if self.duration is not None and self.duration < self.secondary_catch_up:
            raise FieldProblem(
                ("duration",),
                "stepdown: `duration` (the stepdown period) must be at least `secondary_catch_up`",
            )

    @property
    def period(self) -> float:
        """The stepdown period: `duration`, else MongoDB's default."""
        return self.duration if self.duration is not None else DEFAULT_STEPDOWN_S

    def takes_member_down(self) -> bool:
        return False

    def plan_words(self, platform: str) -> str:
        force = ", force" if self.force else ""
        return (
            f"replSetStepDown: not electable for {_secs(self.period)}, "
            f"secondaries get {_secs(self.secondary_catch_up)} to catch up{force}"
        )
