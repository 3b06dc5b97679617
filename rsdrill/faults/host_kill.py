"""host-kill: the member's host is lost, then restarted (after a delay, or as vSphere HA would)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from rsdrill import registry
from rsdrill.faults.base import FaultBase
from rsdrill.faults.spec import KindSpec, LocalTool
from rsdrill.fields import Duration, FieldProblem, Strict
from rsdrill.fields import format_duration as _secs

HA_DETECT_S = 15.0
"""vSphere HA's host failure detection: a host that sends no heartbeat for 15 s and answers no
ping is declared failed, and its VMs are restarted on other hosts (VMware's documentation: see
docs/platforms/vsphere.md)."""
HA_BOOT_S = 60.0
"""The guest's boot, from power-on to mongod's start: an assumption (BIOS/EFI, the OS, its
services), not a VMware figure."""

_HA_ONLY = ("detect", "boot")


class Restart(Strict):
    """host-kill: how the member comes back (as an HA restart would bring a host back)."""

    model: Literal["delay", "ha"] = Field(
        "delay",
        description="delay: restart after `after` (or the fault's duration); ha: as vSphere HA "
        "restarts a failed host's VM: the failure is detected after `detect`, the host boots "
        "for `boot`, then the member starts; each phase is measured (faults[i].detail.ha)",
    )
    after: Duration | None = Field(
        None, description="restart this long after the kill (default: the fault's duration)"
    )
    volume: Literal["keep", "wipe"] = Field(
        "keep", description="keep: restart on the data (catch up); wipe: full initial sync"
    )
    detect: Duration = Field(
        HA_DETECT_S,
        description="model ha: the time HA takes to declare the host failed and restart it "
        "(default 15 s, vSphere HA's documented detection)",
    )
    boot: Duration = Field(
        HA_BOOT_S,
        description="model ha, sandbox and local: the host's boot before mongod starts "
        "(default 60 s, an assumption); on vSphere the VM boots by itself",
    )


class HostKillFault(FaultBase):
    """The member's host is lost (SIGKILL, pod/instance/VM power-off)."""

    SPEC: ClassVar[KindSpec] = KindSpec(
        "host-kill",
        "the member's host is lost (SIGKILL, pod/instance/VM power-off); restarted after "
        "`restart.after` or `duration`, or as vSphere HA would (`restart.model: ha`)",
        fields_doc="`restart: {after, volume: keep\\|wipe}` or `false`; `restart: {model: "
        "ha, detect, boot}`: HA's detection, the host's boot, the member's start, each "
        "measured; `power_loss: true` "
        "drops writes not yet fsynced; `scope: node\\|host` (Kubernetes node, ESXi host)",
        for_good={"restart": False},
        sharded="members and routers",
    )

    kind: Literal["host-kill"]
    restart: Restart | Literal[False] = Field(
        default_factory=Restart, description="host-kill only; false: never restart"
    )
    power_loss: bool = Field(
        False, description="host-kill: writes not yet fsynced are lost, as in a power-off"
    )

    def check(self) -> None:
        restart = self.restart
        if not restart:
            return
        if restart.model == "ha":
            if restart.after is not None:
                raise FieldProblem(("restart", "after"), "model ha restarts the host `detect` "
                                   "after the failure (then it boots for `boot`): drop "
                                   "`after`")  # fmt: skip
            if self.duration is not None:
                raise FieldProblem(("duration",), "model ha restarts the host `detect` after "
                                   "the failure: drop `duration`")  # fmt: skip
            return
        for name in _HA_ONLY:
            if name in restart.model_fields_set:
                raise FieldProblem(("restart", name), f"{name} applies to restart model ha: "
                                   "add `model: ha`, or drop it")  # fmt: skip
        if restart.after is None and self.duration is None:
            raise FieldProblem(
                ("duration",), "host-kill needs `duration` or `restart.after` (or restart: false)"
            )

    @property
    def revert_after(self) -> float | None:
        """The host comes back after `restart.after` or `duration`; with the HA model once HA
        has detected the failure (its boot and the member's start follow)."""
        if self.restart is False:
            return None
        if self.restart.model == "ha":
            return self.restart.detect
        after = self.restart.after
        return after if after is not None else self.duration

    @property
    def wiped_on_restart(self) -> bool:
        """The member comes back on an empty data volume (`restart.volume: wipe`)."""
        return bool(self.restart) and self.restart is not False and self.restart.volume == "wipe"

    @property
    def ha_restart(self) -> Restart | None:
        """Its restart if it follows vSphere HA's model (`model: ha`)."""
        restart = self.restart
        return restart if restart and restart.model == "ha" else None

    def rebuilds_data(self) -> bool:
        return self.wiped_on_restart

    def local_tools(self) -> tuple[LocalTool, ...]:
        return ("fuse",) if self.power_loss else ()  # its power loss goes through faultfs

    def plan_words(self, platform: str) -> str:
        if registry.on_this_machine(platform):
            how = "SIGKILL, unsynced writes lost" if self.power_loss else "SIGKILL"
        else:
            how = f"{platform}: lose the host"
        if self.scope != "member":
            how += f" (its whole {self.scope})"
        return how if self.restart else f"{how}; never restarted"

    def plan_revert_words(self, platform: str, them: str) -> str:
        if self.wiped_on_restart:
            data = "an empty data directory (full initial sync)"
        else:
            data = f"{'their' if them == 'them' else 'its'} kept data directory"
        restart = self.ha_restart
        if restart is not None:
            detected = f"HA restarts {them} (detected after {_secs(restart.detect)}): "
            if registry.on_this_machine(platform):
                return f"{detected}boot {_secs(restart.boot)}, then the member starts on {data}"
            return f"{detected}power on; the VM boots by itself, mongod starts on {data}"
        return f"restart {them} on {data}"


def ha_detail(restart: Restart, *, boot_waited: bool) -> dict[str, Any]:
    """What an HA restart's injector reports (`faults[i].detail.ha`): the model it followed,
    the boot None where the host boots by itself (a VM); the run's analysis adds the measured
    phases."""
    return {"model": {"detect_s": restart.detect,
                      "boot_s": restart.boot if boot_waited else None}}  # fmt: skip
