"""disk-fault: an errno and/or latency on the member's data files for `duration`."""

from __future__ import annotations

import errno as errno_names
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, Field

from rsdrill.faults.base import FaultBase
from rsdrill.faults.spec import KindSpec, LocalTool
from rsdrill.fields import Duration, FieldProblem
from rsdrill.fields import format_duration as _secs

DiskOperation = Literal["read", "write", "fsync", "open", "any"]


def _errno_name(value: str) -> str:
    if value != "none" and not isinstance(getattr(errno_names, value, None), int):
        raise ValueError(f"{value!r} is not an errno name like EIO, ENOSPC, EROFS (or none)")
    return value


def latency_field() -> Any:
    """The `latency` of the storage kinds: added to every matching operation."""
    return Field(None, description="disk-fault, iops-throttle: added to every matching operation")


class DiskFault(FaultBase):
    SPEC: ClassVar[KindSpec] = KindSpec(
        "disk-fault",
        "an errno and/or latency on the member's data files for `duration`",
        fields_doc="`errno` (EIO, ENOSPC, ... or none), `operations` (read, write, fsync, "
        "open, any), `probability`, `path` (glob), `latency`; `replica` (a or b: one copy "
        "of a sandbox member's mirrored data)",
        needs_duration=True,
    )

    kind: Literal["disk-fault"]
    errno: Annotated[str, AfterValidator(_errno_name)] = Field(
        "EIO", description="disk-fault: the error returned (an errno name), or none"
    )
    operations: tuple[DiskOperation, ...] = Field(
        ("write", "fsync"), min_length=1, description="disk-fault: which operations fail"
    )
    probability: float = Field(
        1.0, gt=0, le=1, description="disk-fault: the share of matching operations that fail"
    )
    path: str | None = Field(
        None,
        description="disk-fault: only files matching this glob, relative to the data "
        "directory (e.g. journal/*)",
    )
    latency: Duration | None = latency_field()
    replica: Literal["a", "b"] | None = Field(
        None,
        description="disk-fault, sandbox with `target.sandbox.mirror`: fail only this copy of "
        "the member's data (vSAN FTT=1's two copies); the other serves, and the failed one is "
        "resynced from it on revert",
    )

    def check(self) -> None:
        if self.errno == "none" and self.latency is None:
            raise FieldProblem(("errno",), "errno none and no latency: the fault does nothing")

    def takes_member_down(self) -> bool:
        # A member fails on a write or an fsync that fails; slow or failing reads leave it up.
        # One copy of mirrored data failing does not reach the member: the other copy serves.
        failing = {"write", "fsync", "any"} & set(self.operations)
        return self.errno != "none" and bool(failing) and self.replica is None

    def local_tools(self) -> tuple[LocalTool, ...]:
        return ("fuse",)

    def plan_words(self, platform: str) -> str:
        parts = []
        if self.errno != "none":
            share = "" if self.probability == 1 else f"{self.probability:.0%} of "
            parts.append(f"{self.errno} on {share}{'/'.join(self.operations)}")
        if self.latency:
            parts.append(f"+{_secs(self.latency)} per {'/'.join(self.operations)}")
        where = f" of {self.path}" if self.path else ""
        copy = f" on replica {self.replica} of its mirrored data" if self.replica else ""
        return self.lasting(f"disk fault{copy}: {', '.join(parts)}{where}")

    def plan_revert_words(self, platform: str, them: str) -> str:
        resync = f", resync replica {self.replica} from the other" if self.replica else ""
        return f"clear the disk fault{resync} on {them}"
