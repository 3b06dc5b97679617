"""zone-outage: every member of a zone lost at once for `duration`, killed or cut off."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from rsdrill import registry
from rsdrill.faults.base import FaultBase, SelectDomain
from rsdrill.faults.spec import KindSpec, LocalTool
from rsdrill.fields import FieldProblem

ZoneWay = Literal["kill", "isolate"]


class ZoneOutageFault(FaultBase):
    SPEC: ClassVar[KindSpec] = KindSpec(
        "zone-outage",
        "every member of the selected zone (or region, or tag) is lost at once for "
        "`duration`: its hosts killed (a power interruption) or the zone cut off from the "
        "other members and the clients (its members still reach each other)",
        fields_doc="`select: {zone: NAME}` (or `{region: NAME}`, `{tag: {k: v}}`, `{domains: "
        "minority\\|majority}`; required); "
        "`way: kill\\|isolate`",
        needs_duration=True,
        sharded="members",
    )

    kind: Literal["zone-outage"]
    way: ZoneWay = Field(
        "isolate",
        description="zone-outage: kill: the zone's hosts lost (restarted on their data after "
        "`duration`); isolate: the zone cut off from the other zones' members and from the "
        "clients, its own members still reaching each other (a majority zone keeps its "
        "primary, which no client reaches)",
    )

    def check(self) -> None:
        if not isinstance(self.select, SelectDomain):
            raise FieldProblem(("select",), "zone-outage takes a failure domain: select: "
                               "{zone: NAME}, {region: NAME}, {tag: {KEY: VALUE}} or {domains: "
                               "minority|majority}")  # fmt: skip

    def out_of_reach(self) -> bool:
        return self.way == "isolate"

    def local_tools(self) -> tuple[LocalTool, ...]:
        return ("nftables",) if self.way == "isolate" else ()

    def plan_words(self, platform: str) -> str:
        if self.way == "kill":
            how = "SIGKILL" if registry.on_this_machine(platform) else f"{platform}: lose"
            return self.lasting(f"{how} every member of the zone at once")
        return self.lasting("cut the zone off from the other zones' members and from clients "
                            "(both ways; its members still reach each other)")  # fmt: skip

    def plan_revert_words(self, platform: str, them: str) -> str:
        if self.way == "kill":
            return f"restart {them} on {'their' if them == 'them' else 'its'} kept data"
        return f"heal the zone's partition on {them}"
