"""iops-throttle: the member's I/O capped for `duration`."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from rsdrill.faults.base import FaultBase
from rsdrill.faults.disk_fault import latency_field
from rsdrill.faults.spec import KindSpec, LocalTool
from rsdrill.fields import Duration, FieldProblem
from rsdrill.fields import format_duration as _secs

LIMITS = ("iops", "read_iops", "write_iops", "throughput_mb_s", "read_mb_s", "write_mb_s")
"""The fields that cap I/O (besides `latency`)."""


class IopsThrottleFault(FaultBase):
    SPEC: ClassVar[KindSpec] = KindSpec(
        "iops-throttle",
        "I/O capped for `duration`",
        fields_doc="`iops`, `read_iops`, `write_iops`, `throughput_mb_s`, `read_mb_s`, "
        "`write_mb_s`, `latency`",
        needs_duration=True,
        drawn={"write_iops": 50},
    )

    kind: Literal["iops-throttle"]
    latency: Duration | None = latency_field()
    iops: int | None = Field(None, gt=0, description="iops-throttle: reads and writes together")
    read_iops: int | None = Field(None, gt=0)
    write_iops: int | None = Field(None, gt=0)
    throughput_mb_s: float | None = Field(None, gt=0, description="iops-throttle: MiB/s")
    read_mb_s: float | None = Field(None, gt=0)
    write_mb_s: float | None = Field(None, gt=0)

    def check(self) -> None:
        if not self.model_fields_set & {*LIMITS, "latency"}:
            raise FieldProblem(
                ("kind",),
                "iops-throttle needs a limit: iops, read_iops, write_iops, "
                "throughput_mb_s, read_mb_s, write_mb_s or latency",
            )

    def takes_member_down(self) -> bool:
        return False

    def local_tools(self) -> tuple[LocalTool, ...]:
        return ("fuse",)

    def plan_words(self, platform: str) -> str:
        limits = [
            f"{label} {value:g}{unit}"
            for label, value, unit in (
                ("iops", self.iops, ""),
                ("read iops", self.read_iops, ""),
                ("write iops", self.write_iops, ""),
                ("throughput", self.throughput_mb_s, " MiB/s"),
                ("reads", self.read_mb_s, " MiB/s"),
                ("writes", self.write_mb_s, " MiB/s"),
            )
            if value is not None
        ]
        if self.latency:
            limits.append(f"+{_secs(self.latency)} per operation")
        return self.lasting(f"throttle the disk: {', '.join(limits)}")

    def plan_revert_words(self, platform: str, them: str) -> str:
        return f"lift the throttle on {them}"
