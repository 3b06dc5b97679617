"""One spec per fault kind: its meaning, its own fields, whether it needs a `duration`, and what
each built-in platform really does for it (exactly, approximately, or one way only).

This is the single source of the fault kinds' names and own fields (`schema.py` builds one
model per kind from it, so a field of another kind is refused), of `rsdrill faults` and of the
README's fault tables (a test fails when they differ). Whether a platform accepts a kind is
decided by the platform's own load-time check; a test keeps the `platforms` entries below true
to those checks.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

Support = Literal["exact", "approximate", "one-way"]
"""exact: the fault itself; approximate: something close to it (said in the cell); one-way: it
cannot be undone within the run (a terminated instance, a volume modification AWS allows once
per 6 hours, wiped data)."""


@dataclass(frozen=True)
class Way:
    """One way a platform carries a kind out."""

    how: str
    support: Support = "exact"


@dataclass(frozen=True)
class KindSpec:
    kind: str
    meaning: str
    fields: tuple[str, ...] = ()
    """Fault fields that belong to this kind only (a shared field may list several kinds)."""
    fields_doc: str = ""
    needs_duration: bool = False
    """Lasts until reverted: without a `duration` it would outlive the run."""
    platforms: dict[str, tuple[Way, ...]] = field(default_factory=dict)
    """Built-in platform ("sandbox" also stands for "local") → its ways; absent: refused."""


_MACHINE = "sandbox"

KINDS: dict[str, KindSpec] = {
    spec.kind: spec
    for spec in (
        KindSpec(
            "host-kill",
            "the member's host is lost (SIGKILL, pod/instance/VM power-off); restarted after "
            "`restart.after` or `duration`",
            fields=("restart", "power_loss"),
            fields_doc="`restart: {after, volume: keep\\|wipe}` or `false`; `power_loss: true` "
            "drops writes not yet fsynced; `scope: node\\|host` (Kubernetes node, ESXi host)",
            platforms={
                _MACHINE: (Way("SIGKILL, restart after a delay, volume keep or wipe"),),
                "kubernetes": (
                    Way("Chaos Mesh pod-kill, Litmus pod-delete or node-drain, pod delete"),
                    Way("node drain and Node delete (scope node)"),
                ),
                "ec2": (
                    Way("stop (force) or reboot; FIS stop-instances"),
                    Way("terminate (allow_terminate)", "one-way"),
                ),
                "vsphere": (Way("power off the VM, or every VM on its ESXi host (scope host)"),),
            },
        ),
        KindSpec(
            "host-freeze",
            "the host freezes (SIGSTOP, pod failure, VM suspend) for `duration`",
            needs_duration=True,
            platforms={
                _MACHINE: (Way("SIGSTOP, then SIGCONT"),),
                "kubernetes": (
                    Way("Chaos Mesh pod-failure: the member stops, then restarts", "approximate"),
                ),
                "vsphere": (Way("suspend the VM, then power it on"),),
            },
        ),
        KindSpec(
            "stepdown",
            "`replSetStepDown` on the primary (any platform)",
            fields=("secondary_catch_up", "force"),
            fields_doc="`duration` (the stepdown period), `secondary_catch_up`, `force`",
            platforms={
                platform: (Way("replSetStepDown"),)
                for platform in (_MACHINE, "kubernetes", "ec2", "vsphere")
            },
        ),
        KindSpec(
            "disk-fault",
            "an errno and/or latency on the member's data files for `duration`",
            fields=("errno", "operations", "probability", "path", "latency"),
            fields_doc="`errno` (EIO, ENOSPC, ... or none), `operations` (read, write, fsync, "
            "open, any), `probability`, `path` (glob), `latency`",
            needs_duration=True,
            platforms={
                _MACHINE: (Way("faultfs: an errno share and/or latency per operation"),),
                "kubernetes": (Way("Chaos Mesh IOChaos: an errno or a latency"),),
                "ec2": (Way("FIS aws:ebs:volume-io-latency: latency only"),),
            },
        ),
        KindSpec(
            "iops-throttle",
            "I/O capped for `duration`",
            fields=(
                "latency",
                "iops",
                "read_iops",
                "write_iops",
                "throughput_mb_s",
                "read_mb_s",
                "write_mb_s",
            ),
            fields_doc="`iops`, `read_iops`, `write_iops`, `throughput_mb_s`, `read_mb_s`, "
            "`write_mb_s`, `latency`",
            needs_duration=True,
            platforms={
                _MACHINE: (Way("faultfs token buckets (IOPS, bandwidth) and latency"),),
                "kubernetes": (
                    Way("Chaos Mesh BlockChaos delay, or IOChaos latency", "approximate"),
                ),
                "ec2": (
                    Way("modify_volume IOPS/throughput (once per volume per 6 h)", "one-way"),
                    Way("FIS aws:ebs:volume-io-latency", "approximate"),
                ),
                "vsphere": (Way("the disk's storageIOAllocation.limit, restored exactly"),),
            },
        ),
        KindSpec(
            "volume-detach",
            "the data volume vanishes for `duration` (every I/O fails), then comes back",
            needs_duration=True,
            platforms={
                _MACHINE: (Way("faultfs: every operation fails"),),
                "kubernetes": (Way("Chaos Mesh IOChaos: every operation fails"),),
                "ec2": (Way("force-detach and re-attach; FIS pause-volume-io"),),
                "vsphere": (Way("remove the disk (its file kept) and add it back"),),
            },
        ),
        KindSpec(
            "network-partition",
            "the member is cut off for `duration`",
            fields=("isolate_from", "direction", "shape", "flapping"),
            fields_doc="`shape: one\\|halves\\|bridge\\|ring` (Jepsen's shapes, from the live "
            "roles), `flapping` (on and off at this interval), "
            "`isolate_from: members\\|clients\\|all`, `direction: "
            "both\\|inbound\\|outbound`",
            needs_duration=True,
            platforms={
                _MACHINE: (Way("nftables on loopback; every shape, flapping"),),
                "kubernetes": (
                    Way("Chaos Mesh NetworkChaos partition (shapes one, halves, bridge)"),
                ),
                "ec2": (
                    Way(
                        "security groups swapped for a deny-all group (isolate_from all, shape one)"
                    ),
                ),
                "vsphere": (Way("disconnect the NIC (isolate_from all, shape one)"),),
            },
        ),
        KindSpec(
            "network-degrade",
            "the member's links get slow, lossy or narrow for `duration`",
            fields=(
                "latency",
                "jitter",
                "loss",
                "bandwidth_mbit_s",
                "duplicate",
                "corrupt",
                "between",
                "direction",
            ),
            fields_doc="`latency` (added to each degraded direction), `jitter`, `loss` (a share), "
            "`bandwidth_mbit_s`, `duplicate`, `corrupt` (shares; Kubernetes), "
            "`between: members\\|clients\\|all`, "
            "`direction: both\\|inbound\\|outbound`",
            needs_duration=True,
            platforms={
                _MACHINE: (
                    Way(
                        "a pacing TCP proxy per member link (nftables redirect); loss as "
                        "TCP retransmission stalls"
                    ),
                ),
                "kubernetes": (
                    Way(
                        "Chaos Mesh NetworkChaos netem (delay, jitter, loss, duplicate, corrupt) "
                        "or bandwidth"
                    ),
                ),
                "ec2": (
                    Way(
                        "FIS aws:ssm:send-command of AWSFIS-Run-Network-Latency or "
                        "-Packet-Loss (outbound, latency or loss)"
                    ),
                ),
            },
        ),
        KindSpec(
            "data-loss",
            "the host and its data are gone (sandbox, local); only a restore step brings them back",
            fields_doc='see "Disaster-recovery drills"',
            platforms={_MACHINE: (Way("SIGKILL and the data directory wiped", "one-way"),)},
        ),
    )
}

KIND_NAMES: tuple[str, ...] = tuple(KINDS)

PLATFORM_COLUMNS: tuple[tuple[str, str], ...] = (
    (_MACHINE, "sandbox / local"),
    ("kubernetes", "Kubernetes"),
    ("ec2", "EC2"),
    ("vsphere", "vSphere"),
)


def kinds_with_field(name: str) -> tuple[str, ...]:
    """The kinds `name` is a field of (empty: a field of every kind)."""
    return tuple(k for k, spec in KINDS.items() if name in spec.fields)


def kind_only_fields() -> tuple[str, ...]:
    """Every field that belongs to some kinds only."""
    return tuple(dict.fromkeys(f for spec in KINDS.values() for f in spec.fields))


def fields_for(kind: str, fields: Iterable[str]) -> list[str]:
    """Of a fault model's `fields`, those a fault of `kind` may have (in their order)."""
    own = set(KINDS[kind].fields)
    others = set(kind_only_fields())
    return [f for f in fields if f not in others or f in own]


def _cell(ways: tuple[Way, ...]) -> str:
    if not ways:
        return "refused when loaded"
    marks = {"exact": "", "approximate": " *approx.*", "one-way": " *one-way*"}
    return "; ".join(f"{way.how}{marks[way.support]}" for way in ways)


def fault_table() -> str:
    """The README's table of kinds: what each does and its own fields (Markdown)."""
    lines = ["| kind | what it does | its own fields |", "|---|---|---|"]
    lines += [f"| `{s.kind}` | {s.meaning} | {s.fields_doc} |" for s in KINDS.values()]
    return "\n".join(lines) + "\n"


def support_table() -> str:
    """The README's fault-by-platform table: what each platform really does (Markdown)."""
    head = " | ".join(title for _, title in PLATFORM_COLUMNS)
    lines = [f"| fault | {head} |", "|---" * (len(PLATFORM_COLUMNS) + 1) + "|"]
    for spec in KINDS.values():
        cells = " | ".join(_cell(spec.platforms.get(p, ())) for p, _ in PLATFORM_COLUMNS)
        lines.append(f"| `{spec.kind}` | {cells} |")
    return "\n".join(lines) + "\n"
