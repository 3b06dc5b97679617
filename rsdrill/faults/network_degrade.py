"""network-degrade: the member's links slow, lossy or narrow for `duration`."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from rsdrill.faults.base import FaultBase
from rsdrill.faults.network_partition import DIRECTION_WORDS, PEER_WORDS, Direction, Peers
from rsdrill.faults.spec import KindSpec, LocalTool
from rsdrill.fields import Duration, FieldProblem
from rsdrill.fields import format_duration as _secs

SHAPES = ("latency", "loss", "bandwidth_mbit_s", "duplicate", "corrupt")
"""The fields of which a degrade needs one: what it does to the links."""


class NetworkDegradeFault(FaultBase):
    SPEC: ClassVar[KindSpec] = KindSpec(
        "network-degrade",
        "the member's links get slow, lossy or narrow for `duration`",
        fields_doc="`latency` (added to each degraded direction), `jitter`, `loss` (a share), "
        "`bandwidth_mbit_s`, `duplicate`, `corrupt`, `reorder` (shares; Kubernetes; "
        "`reorder` needs `latency`), `between: members\\|clients\\|all`, "
        "`direction: both\\|inbound\\|outbound`",
        needs_duration=True,
    )

    kind: Literal["network-degrade"]
    latency: Duration | None = Field(
        None, description="network-degrade: added to what crosses each degraded direction"
    )
    jitter: Duration | None = Field(
        None, description="network-degrade: latency varies uniformly by up to this much"
    )
    loss: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="network-degrade: the share of segments lost (TCP resends them: a stall)",
    )
    bandwidth_mbit_s: float | None = Field(
        None, gt=0, description="network-degrade: each degraded direction's rate, Mbit/s"
    )
    duplicate: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="network-degrade (kubernetes): the share of packets sent twice",
    )
    corrupt: float | None = Field(
        None, gt=0, lt=1, description="network-degrade (kubernetes): the share of packets corrupted"
    )
    reorder: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="network-degrade (kubernetes, chaos-mesh): the share of packets sent at once, "
        "ahead of those `latency` holds back",
    )
    between: Peers = Field(
        "all", description="network-degrade: which of the member's links are degraded"
    )
    direction: Direction = Field(
        "both", description="network-degrade: which of its traffic is degraded"
    )

    def check(self) -> None:
        given = self.model_fields_set
        if all(getattr(self, name) is None for name in SHAPES):
            raise FieldProblem(("kind",), "network-degrade needs latency, loss, "
                               "bandwidth_mbit_s, duplicate or corrupt")  # fmt: skip
        if "jitter" in given and "latency" not in given:
            raise FieldProblem(("jitter",), "jitter varies the latency: give `latency` too")
        # netem reorders by sending some packets at once while the rest wait `latency`.
        if "reorder" in given and not self.latency:
            raise FieldProblem(("reorder",), "reorder sends some packets ahead of those "
                               "`latency` delays: give a `latency` above 0")  # fmt: skip

    def takes_member_down(self) -> bool:
        return False

    def local_tools(self) -> tuple[LocalTool, ...]:
        return ("nftables",)

    def plan_words(self, platform: str) -> str:
        shaped = [
            text
            for text, given in (
                (f"+{_secs(self.latency or 0)}", self.latency),
                (f"± {_secs(self.jitter or 0)}", self.jitter),
                (f"{(self.loss or 0):.0%} loss", self.loss),
                (f"{self.bandwidth_mbit_s or 0:g} Mbit/s", self.bandwidth_mbit_s),
                (f"{(self.duplicate or 0):.0%} duplicated", self.duplicate),
                (f"{(self.corrupt or 0):.0%} corrupted", self.corrupt),
                (f"{(self.reorder or 0):.0%} reordered", self.reorder),
            )
            if given
        ]
        return self.lasting(
            f"degrade its links to {PEER_WORDS[self.between]} "
            f"({DIRECTION_WORDS[self.direction]}): " + ", ".join(shaped),
        )

    def plan_revert_words(self, platform: str, them: str) -> str:
        return f"restore the links on {them}"
