"""data-loss: the host and its data are gone; only a restore step brings them back."""

from __future__ import annotations

from typing import ClassVar, Literal

from rsdrill.faults.base import FaultBase
from rsdrill.faults.spec import KindSpec


class DataLossFault(FaultBase):
    SPEC: ClassVar[KindSpec] = KindSpec(
        "data-loss",
        "the host and its data are gone (sandbox, local); only a restore step brings them back",
        fields_doc='see "Disaster-recovery drills"',
        reverted=False,
        disaster=True,
        unavailable="(a wiped data directory) is for sandbox and local targets; on "
        "{platform}, destroy the volumes with a step of your own",
    )

    kind: Literal["data-loss"]

    def rebuilds_data(self) -> bool:
        return True  # a restore brings its data back, not the oplog

    def plan_words(self, platform: str) -> str:
        return "SIGKILL, data directory emptied, no restart: the restore step brings it back"
