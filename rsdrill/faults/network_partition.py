"""network-partition: the member cut off for `duration` (Jepsen's shapes around it, flapping)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from rsdrill.faults.base import FaultBase
from rsdrill.faults.spec import KindSpec, LocalTool
from rsdrill.fields import Duration, FieldProblem
from rsdrill.fields import format_duration as _secs

Peers = Literal["members", "clients", "all"]
Direction = Literal["both", "inbound", "outbound"]
PEER_WORDS: dict[Peers, str] = {
    "members": "the other members",
    "clients": "clients",
    "all": "everyone",
}
DIRECTION_WORDS: dict[Direction, str] = {
    "both": "both ways",
    "inbound": "inbound only",
    "outbound": "outbound only",
}


class NetworkPartitionFault(FaultBase):
    SPEC: ClassVar[KindSpec] = KindSpec(
        "network-partition",
        "the member is cut off for `duration`",
        fields_doc="`shape: one\\|halves\\|bridge\\|ring` (Jepsen's shapes, from the live "
        "roles), `flapping` (on and off at this interval), "
        "`isolate_from: members\\|clients\\|all`, `direction: "
        "both\\|inbound\\|outbound`",
        needs_duration=True,
        sharded="members",
    )

    kind: Literal["network-partition"]
    isolate_from: Peers = Field(
        "members", description="network-partition: who loses contact with the member"
    )
    direction: Direction = Field(
        "both",
        description="network-partition: inbound: others cannot reach the member; "
        "outbound: it cannot reach them",
    )
    shape: Literal["one", "halves", "bridge", "ring"] = Field(
        "one",
        description="network-partition, as Jepsen names them: one: the selected member alone; "
        "halves: it and the fewest others on the minority side; bridge: two halves that only "
        "the selected member joins; ring: each member reaches only its neighbours",
    )
    flapping: Duration | None = Field(
        None,
        gt=0,
        description="network-partition: cut and healed in turn at this interval for `duration`",
    )

    def check(self) -> None:
        flapping, duration = self.flapping, self.duration
        if flapping is not None and duration is not None and flapping * 2 > duration:
            raise FieldProblem(
                ("flapping",), "flapping: the interval must fit twice into `duration`"
            )

    def takes_member_down(self) -> bool:
        return self.isolate_from != "clients"  # cut from clients alone, it stays in the majority

    def local_tools(self) -> tuple[LocalTool, ...]:
        return ("nftables",)

    def plan_words(self, platform: str) -> str:
        flap = f", cut and healed every {_secs(self.flapping)}" if self.flapping else ""
        if self.shape != "one":
            done = f"partition shape {self.shape} around it (member links, both ways){flap}"
        else:
            done = (f"cut it off from {PEER_WORDS[self.isolate_from]} "
                    f"({DIRECTION_WORDS[self.direction]}){flap}")  # fmt: skip
        return self.lasting(done)

    def plan_revert_words(self, platform: str, them: str) -> str:
        return f"heal the partition on {them}"
