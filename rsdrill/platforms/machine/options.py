"""`platform: sandbox` and `platform: local`: faults on member processes of this machine."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rsdrill.fields import FieldProblem
from rsdrill.platforms.machine.mirror import mirrored

if TYPE_CHECKING:
    from rsdrill.experiment.schema import Experiment, Fault

# The kinds carried out by a faultfs rule under the member's data directory.
STORAGE_KINDS = ("disk-fault", "iops-throttle", "volume-detach")


def needs_faultfs(faults: Sequence[Fault]) -> tuple[bool, bool]:
    """(whether members must run on faultfs, whether unsynced writes must be tracked)."""
    power_loss = any(f.kind == "host-kill" and f.power_loss for f in faults)
    return power_loss or any(f.kind in STORAGE_KINDS for f in faults), power_loss


def check_experiment(exp: Experiment) -> None:
    """Faults here act on processes, files and loopback traffic: no platform engines, and
    only `scope: member`."""
    _sandbox_members_named(exp)
    for i, fault in enumerate(exp.faults):
        needs_dbpath = {"data-loss": "to wipe", "disk-fill": "(a filesystem of its own) to fill"}
        if fault.kind in needs_dbpath and exp.target.platform == "local":
            for j, member in enumerate(exp.target.members):
                if not member.dbpath:
                    raise FieldProblem(
                        ("target", "members", j, "dbpath"),
                        f"faults[{i}] is a {fault.kind}: every member needs its `dbpath` "
                        f"{needs_dbpath[fault.kind]}",
                    )
        if fault.kind == "disk-fill" and _on_faultfs(exp):
            raise FieldProblem(("faults", i, "kind"), "disk-fill and faults through faultfs or "
                               "mirrored data cannot share a run (one data directory)")  # fmt: skip
        if fault.kind == "disk-fill" and exp.target.keep:
            raise FieldProblem(("target", "keep"), "disk-fill puts the members on disks of the "
                               "run's own: the sandbox cannot be kept")  # fmt: skip
        if fault.kind == "clock-skew" and exp.target.platform == "local" and fault.clock_drift:
            raise FieldProblem(("faults", i, "clock_drift"), "clock_drift is not available on "
                               "local: libfaketime's rate counts from the member's start, not "
                               "the fault's, and stays after the offset is set back")  # fmt: skip
        if fault.engine is not None:
            raise FieldProblem(
                ("faults", i, "engine"),
                f"platform {exp.target.platform} has no fault engines (drop `engine`)",
            )
        if fault.scope != "member":
            raise FieldProblem(
                ("faults", i, "scope"),
                f"scope {fault.scope} needs a platform with nodes or hosts "
                f"(kubernetes, vsphere); on {exp.target.platform} a member is its host",
            )
        if fault.kind == "network-degrade":
            for name in ("duplicate", "corrupt"):
                if name in fault.model_fields_set:
                    raise FieldProblem(
                        ("faults", i, name),
                        f"{name} is not available on {exp.target.platform}: its links are TCP "
                        "streams through a proxy, and TCP hands the application neither "
                        "duplicated nor corrupted segments (a duplicate is dropped, a corrupted "
                        "one resent: use `loss`)",
                    )
            if "reorder" in fault.model_fields_set:
                raise FieldProblem(
                    ("faults", i, "reorder"),
                    f"reorder is not available on {exp.target.platform}: its links are TCP "
                    "streams through a proxy, and TCP puts segments back in order before the "
                    "application reads them (a reordered segment is only a late one: use "
                    "`latency` with `jitter`)",
                )
        if fault.kind == "network-partition" and fault.shape != "one":
            for name in ("isolate_from", "direction"):
                if name in fault.model_fields_set:
                    raise FieldProblem(
                        ("faults", i, name),
                        f"shape {fault.shape} cuts member links both ways: drop `{name}` "
                        "(it applies to shape one)",
                    )
    _check_storage(exp)


def _on_faultfs(exp: Experiment) -> bool:
    return needs_faultfs(exp.faults)[0] or mirrored(exp.target)


def _check_mirror(exp: Experiment) -> None:
    """A disk-fault's `replica` is one copy of mirrored data: only a mirrored sandbox has them.
    Mirrored data have no undo records, which power_loss needs."""
    for i, fault in enumerate(exp.faults):
        if fault.kind == "disk-fault" and fault.replica is not None and not mirrored(exp.target):
            where = ("add `sandbox: {mirror: true}` to the target" if exp.target.platform ==
                     "sandbox" else "a local member's data directory has one copy")  # fmt: skip
            raise FieldProblem(("faults", i, "replica"), f"replica {fault.replica} is one copy "
                               f"of a sandbox member's mirrored data: {where}")  # fmt: skip
        if fault.kind == "host-kill" and fault.power_loss and mirrored(exp.target):
            raise FieldProblem(("faults", i, "power_loss"), "power_loss drops the writes one "
                               "data directory has not fsynced; mirrored data (target.sandbox."
                               "mirror) keep no record of them")  # fmt: skip


def _check_storage(exp: Experiment) -> None:
    """Storage faults, power_loss and mirrored data act through faultfs under the members'
    data: a sandbox mounts it for the run only (so it cannot be kept), local members must name
    their mount."""
    _check_mirror(exp)
    if not _on_faultfs(exp):
        return
    if exp.target.platform == "sandbox" and exp.target.keep:
        raise FieldProblem(
            ("target", "keep"),
            "storage faults, power_loss and mirrored data put the members on faultfs for the "
            "run only: drop `keep`",
        )
    for i, member in enumerate(exp.target.members):
        if not member.faultfs:
            raise FieldProblem(
                ("target", "members", i, "faultfs"),
                "storage faults and power_loss need each member's data directory on faultfs: "
                "mount it (`rsdrill faultfs mount DBPATH DBPATH`) and give its mount point here",
            )


def _sandbox_members_named(exp: Experiment) -> None:
    """A member the sandbox cannot have would be found missing only at its fault's time, with
    the set built and the probes running: its members' addresses are known before the run only
    from `port_base`."""
    if exp.target.platform != "sandbox":
        return
    from rsdrill.faults.base import SelectMember
    from rsdrill.sandbox.config import build_topology

    base, topology = exp.target.port_base, exp.target.topology
    for i, fault in enumerate(exp.faults):
        if not isinstance(fault.select, SelectMember):
            continue
        where = ("faults", i, "select", "member")
        if base is None:
            raise FieldProblem(where, "the sandbox's members get free ports at run time: "
                               "select them by role (primary, secondary, {count: N}), or set "
                               "target.port_base to name one by address")  # fmt: skip
        if topology == "sharded":
            continue  # its routers, config servers and shards each have their ports
        hosts = [m.host for m in build_topology(topology, port_base=base).members]
        if fault.select.member not in hosts:
            raise FieldProblem(where, f"{fault.select.member} is not a member of the sandbox "
                               f"(its {topology} members: {', '.join(hosts)})")  # fmt: skip
