"""`platform: vsphere`: the vCenter to talk to, how members map to VMs, per-fault options, and
which faults vSphere can inject (checked when the file is loaded, before anything is touched).

The password never appears here: it is read from an environment variable whose *name* may be
configured (`password_env`), when the connection is made.
"""

from __future__ import annotations

import re
import string
from typing import TYPE_CHECKING, Literal

from pydantic import Field, model_validator

from rsdrill.experiment.catalog import privileges_of
from rsdrill.faults import COMMAND_KINDS
from rsdrill.fields import Duration, FieldProblem, Strict, refuse_partition_shapes

if TYPE_CHECKING:
    from rsdrill.experiment.schema import Experiment, Fault

# Tried in this order when `password_env` is not given.
DEFAULT_PASSWORD_VARIABLES = ("RSDRILL_VSPHERE_PASSWORD", "VSPHERE_PASSWORD")
# What a VM name pattern may refer to: the member's host, its first DNS label, its port.
NAME_PLACEHOLDERS = ("host", "short", "port")
_VARIABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class MemberVms(Strict):
    """How a member (host:port from the set's hello) is found among the VMs."""

    by: Literal["guest", "name", "map"] = Field(
        "guest",
        description="guest: the VM whose guest hostname or IP address (reported by VMware "
        "Tools) is the member's host; name: the VM named by `name`; map: the explicit `map`",
    )
    name: str | None = Field(
        None,
        description="by: name — a VM name pattern with {host}, {short} (the host's first DNS "
        "label) and {port}, e.g. mongo-{short}",
    )
    map: dict[str, str] = Field(
        default_factory=dict, description="by: map — member host:port → VM name"
    )

    @model_validator(mode="after")
    def _fits_by(self) -> MemberVms:
        if self.by == "map" and not self.map:
            raise FieldProblem(("map",), "by: map needs `map` (member host:port → VM name)")
        if self.by != "map" and self.map:
            raise FieldProblem(("map",), f"`map` is used with by: map, not by: {self.by}")
        if self.by == "name" and not self.name:
            raise FieldProblem(("name",), "by: name needs `name`, a pattern like mongo-{short}")
        if self.by != "name" and self.name is not None:
            raise FieldProblem(("name",), f"`name` is used with by: name, not by: {self.by}")
        if self.name is not None:
            try:
                fields = [f for _, f, _, _ in string.Formatter().parse(self.name) if f is not None]
            except ValueError as exc:
                raise FieldProblem(("name",), f"not a name pattern: {exc}") from None
            unknown = [f for f in fields if f not in NAME_PLACEHOLDERS]
            if unknown:
                raise FieldProblem(
                    ("name",),
                    f"unknown placeholder {{{unknown[0]}}}: use "
                    + ", ".join(f"{{{p}}}" for p in NAME_PLACEHOLDERS),
                )
        for member in self.map:
            if not re.fullmatch(r"[^:\s]+:\d+", member):
                raise FieldProblem(("map", member), "keys are members as host:port")
        return self


class VspherePlatform(Strict):
    """The vCenter (or ESXi host) that runs the members' VMs, and how members map to VMs."""

    host: str = Field(description="vCenter address (a name or IP, no scheme); ${VAR} allowed")
    port: int = Field(443, ge=1, le=65535)
    user: str = Field(description="e.g. rsdrill@vsphere.local; ${VAR} allowed")
    password_env: str | None = Field(
        None,
        description="the NAME of the environment variable holding the password (default: "
        + " then ".join(DEFAULT_PASSWORD_VARIABLES)
        + ")",
    )
    insecure: bool = Field(
        False, description="skip TLS certificate verification (only for a lab or a simulator)"
    )
    ca_file: str | None = Field(
        None, description="a PEM bundle of the CAs that signed vCenter's certificate"
    )
    datacenter: str | None = Field(None, description="look for VMs in this datacenter only")
    vms: MemberVms = Field(default_factory=MemberVms)
    task_timeout: Duration = Field(
        120.0, description="the longest wait for one vCenter task (power-off, reconfigure...)"
    )

    @model_validator(mode="after")
    def _sane(self) -> VspherePlatform:
        if "://" in self.host or "/" in self.host:
            raise FieldProblem(("host",), "the vCenter's name or address only (no https://, "
                               "no path); the port goes in `port`")  # fmt: skip
        if not self.host.strip():
            raise FieldProblem(("host",), "empty: the vCenter's name or address")
        if self.password_env is not None and not _VARIABLE_NAME.fullmatch(self.password_env):
            # Never echo the value: a password pasted here must not reach a log or a terminal.
            raise FieldProblem(("password_env",), "must be the NAME of an environment variable "
                               "(letters, digits, _), not the password itself")  # fmt: skip
        if self.insecure and self.ca_file:
            raise FieldProblem(("ca_file",), "insecure: true skips verification: drop one")
        if self.task_timeout <= 0:
            raise FieldProblem(("task_timeout",), "must be more than 0")
        return self


class VsphereFault(Strict):
    """Options of one fault on vsphere (`faults[i].vsphere`)."""

    restart_on: str = Field(
        "same",
        description="host-kill: where the VMs are powered on again on revert — same: where "
        "they were; other: another host of the cluster (as vSphere HA would do after a host "
        "failure); or an ESXi host's name",
    )
    disk: str | int | None = Field(
        None,
        description="volume-detach, iops-throttle: the data disk, by label (e.g. Hard disk 2) "
        "or unit number; default: the VM's only disk",
    )
    nic: str | None = Field(
        None,
        description="network-partition: the network adapter to disconnect, by label (e.g. "
        "Network adapter 1); default: every connected one",
    )


# Why a fault kind or field cannot be had on vSphere, by the field that asks for it.
_WHY_NOT = {
    "disk-fault": "disk-fault is not available on vSphere: its API cannot make a virtual disk "
    "return I/O errors or add latency per operation; use volume-detach (remove the disk) or "
    "iops-throttle (storageIOAllocation.limit)",
    "cpu-starve": "cpu-starve is not available on vSphere yet (a VM CPU limit is not wired in)",
    "memory-pressure": "memory-pressure is not available on vSphere",
    "clock-skew": "clock-skew is not available on vSphere",
    "disk-fill": "disk-fill is not available on vSphere",
    "network-degrade": "network-degrade is not available on vSphere: a VM's network adapter "
    "has no latency, loss or rate setting; run it on the sandbox, local, Kubernetes or EC2",
}
_PER_DIRECTION = ("read_iops", "write_iops", "throughput_mb_s", "read_mb_s", "write_mb_s",
                  "latency")  # fmt: skip
_OPTION_KINDS = {
    "restart_on": ("host-kill",),
    "disk": ("volume-detach", "iops-throttle"),
    "nic": ("network-partition",),
}


def _problem(i: int, *at: str | int, text: str) -> FieldProblem:
    return FieldProblem(("faults", i, *at), text)


def check_experiment(exp: Experiment) -> None:
    """Refuse what vSphere cannot do, naming the field: disk-fault, engines, node scope,
    per-direction I/O limits, partial network partitions, volume wipe, a zone cut off,
    misplaced options."""
    for i, fault in enumerate(exp.faults):
        if fault.kind in _WHY_NOT:
            raise _problem(i, "kind", text=_WHY_NOT[fault.kind])
        if fault.engine is not None:
            raise _problem(i, "engine", text="vsphere has one way to inject each fault (its "
                           "API): drop `engine`")  # fmt: skip
        if fault.scope == "node":
            raise _problem(i, "scope", text="scope node is for kubernetes; on vsphere: member "
                           "(the VM) or host (every VM on its ESXi host)")  # fmt: skip
        if fault.scope == "host" and fault.kind not in ("host-kill", *COMMAND_KINDS):
            raise _problem(i, "scope", text=f"scope host (an ESXi host failure) applies to "
                           f"host-kill, not {fault.kind}")  # fmt: skip
        _check_kind(i, fault)


def _check_kind(i: int, fault: Fault) -> None:
    if fault.kind == "host-kill" and fault.restart and fault.restart.volume == "wipe":
        raise _problem(i, "restart", "volume", text="a VM restarts on its own disks on vsphere: "
                       "volume wipe is not available")  # fmt: skip
    if fault.kind == "host-kill" and fault.restart and "boot" in fault.restart.model_fields_set:
        raise _problem(i, "restart", "boot", text="a VM boots by itself once HA (here rsdrill, "
                       "`detect` after the failure) powers it on; its boot is measured "
                       "(faults[i].detail.ha.boot_s): drop `boot`")  # fmt: skip
    if fault.kind == "iops-throttle":
        for name in _PER_DIRECTION:
            if name in fault.model_fields_set:
                raise _problem(i, name, text="vSphere limits a disk's I/O operations per second, "
                               "reads and writes together (storageIOAllocation.limit): use "
                               "`iops`")  # fmt: skip
    if fault.kind == "network-partition":
        if "isolate_from" in fault.model_fields_set and fault.isolate_from != "all":
            raise _problem(i, "isolate_from", text="vsphere disconnects the VM's network "
                           "adapter: it loses everyone; write isolate_from: all")  # fmt: skip
        if fault.direction != "both":
            raise _problem(i, "direction", text="a disconnected network adapter cuts both "
                           "directions: drop `direction`")  # fmt: skip
        refuse_partition_shapes(i, fault, "vsphere disconnects one VM's network adapter")
    if fault.kind == "zone-outage" and fault.way != "kill":
        raise _problem(i, "way", text="zone-outage on vsphere takes way: kill (the zone's VMs "
                       "powered off); cutting a zone off is not there: disconnecting its "
                       "VMs' network adapters would cut them off from each other too")  # fmt: skip
    options = fault.section("vsphere", VsphereFault)
    if options is None:
        return
    for name in sorted(options.model_fields_set):
        kinds = _OPTION_KINDS[name]
        if fault.kind not in kinds:
            raise _problem(i, "vsphere", name, text=f"applies to {' and '.join(kinds)}, "
                           f"not {fault.kind}")  # fmt: skip
    if (
        fault.kind == "host-kill"
        and fault.restart is False
        and ("restart_on" in options.model_fields_set)
    ):
        raise _problem(i, "vsphere", "restart_on", text="restart: false never powers the VMs "
                       "on again")  # fmt: skip


def plan_details(exp: Experiment) -> list[str]:
    """Where rsdrill connects, how members map to VMs, and the privileges the faults need."""
    platform = exp.target.section("vsphere", VspherePlatform)
    assert platform is not None  # the schema requires the section
    tls = ("TLS NOT verified (insecure: true)" if platform.insecure
           else f"TLS verified against {platform.ca_file or 'the system CAs'}")  # fmt: skip
    variables = (platform.password_env,) if platform.password_env else DEFAULT_PASSWORD_VARIABLES
    how = {"guest": "their guest hostname or IP (VMware Tools)",
           "name": f"name {platform.vms.name}", "map": "the map"}[platform.vms.by]  # fmt: skip
    lines = [f"vCenter {platform.host}:{platform.port} as {platform.user}, password from "
             f"${' or $'.join(variables)}; {tls}",
             f"members → VMs by {how}; every task waited for at most "
             f"{platform.task_timeout:g}s"]  # fmt: skip
    needed = ["System.View", "System.Read"]
    for _, variant in exp.variants():
        for fault in variant.faults:
            needed += [p for p in privileges_of("vsphere", fault) if p not in needed]
    lines.append(f"privileges needed: {', '.join(needed)}")
    return lines
