"""EBS faults through the API: force-detach the member's data volume (re-attached to the same
device on revert), and throttle it with modify_volume (IOPS and throughput restored on revert).

AWS lets a volume be modified once per 6 hours (newer accounts: up to four times a day, each
after the last completed). A throttle is one modification and its restore another, so the
throttle is one-way: it runs only with the fault's `one_way: true`, and its journaled revert
holds the earliest time the restore can succeed (`not_before`, injection + 6 h), which a refused
restore names. The volume's modification history is checked first: a recent modification
refuses the throttle (nothing changes) unless the experiment sets
`accept_modification_limit: true`.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from rsdrill.platforms.base import InjectionError
from rsdrill.platforms.ec2.client import Aws, AwsError
from rsdrill.platforms.ec2.instance import _wait_attached, _wait_volume
from rsdrill.platforms.ec2.lookup import Instance, describe_volume

MODIFICATION_COOLDOWN = dt.timedelta(hours=6)


class VolumeDetach:
    """Force-detach the data volume: the member's disk vanishes under it."""

    kind = "volume-detach"

    def __init__(self, aws: Aws, instance: Instance, volume_id: str, device: str) -> None:
        self.aws = aws
        self.instance = instance
        self.target = instance.member
        self.volume_id = volume_id
        self.device = device

    def describe(self) -> str:
        return (f"force-detach {self.volume_id} ({self.device}) from {self.instance.id} "
                f"({self.target}); later attach it again at {self.device}")  # fmt: skip

    def revert_action(self) -> dict[str, Any]:
        return {"action": "ec2.attach-volume", **self.aws.conn.to_action(),
                "volume_id": self.volume_id, "instance_id": self.instance.id,
                "device": self.device}  # fmt: skip

    def inject(self) -> None:
        self.aws.ec2("detach_volume", VolumeId=self.volume_id, InstanceId=self.instance.id,
                     Device=self.device, Force=True)  # fmt: skip

    def verify(self, timeout_s: float) -> bool:
        # The instance has lost the device once the detachment started (forced: at once).
        def check() -> tuple[bool, str]:
            volume = describe_volume(self.aws, self.volume_id)
            mine = [a["State"] for a in volume.get("Attachments", [])
                    if a["InstanceId"] == self.instance.id]  # fmt: skip
            return not mine or mine[0] in ("detaching", "detached"), volume["State"]

        return self.aws.poll(f"{self.volume_id} detached", check, timeout_s)

    def revert(self) -> None:
        attach_volume(self.aws, self.revert_action())


def attach_volume(aws: Aws, action: dict[str, Any]) -> str:
    """Attach the volume to the instance at the device, once it is free; wait until attached.
    Repeatable: already attached there, nothing is done."""
    volume_id, instance_id, device = action["volume_id"], action["instance_id"], action["device"]
    volume = describe_volume(aws, volume_id)
    attachments = volume.get("Attachments", [])
    if any(a["InstanceId"] == instance_id and a["State"] in ("attaching", "attached")
           for a in attachments):  # fmt: skip
        _wait_attached(aws, volume_id, instance_id)
        return f"{volume_id} already attached to {instance_id} at {device}"
    if any(a["InstanceId"] != instance_id for a in attachments):
        other = attachments[0]["InstanceId"]
        raise AwsError(f"{volume_id} is attached to {other}, not {instance_id}: detach it there "
                       "first", "VolumeInUse")  # fmt: skip
    _wait_volume(aws, volume_id, "available")  # a force detach may still be finishing
    aws.ec2("attach_volume", VolumeId=volume_id, InstanceId=instance_id, Device=device)
    _wait_attached(aws, volume_id, instance_id)
    return f"attached {volume_id} to {instance_id} at {device}"


class IopsThrottle:
    """modify_volume to lower provisioned IOPS and/or throughput; restored on revert."""

    kind = "iops-throttle"

    def __init__(
        self,
        aws: Aws,
        instance: Instance,
        volume_id: str,
        *,
        iops: int | None,
        throughput_mb_s: float | None,
        accept_modification_limit: bool,
        field: str,
        one_way: bool,
    ) -> None:
        self.aws = aws
        self.instance = instance
        self.target = instance.member
        self.volume_id = volume_id
        self.accept = accept_modification_limit
        self.one_way = one_way
        self.not_before: dt.datetime | None = None
        # Where the experiment sets the acceptance, for the refusal message.
        self.field = field
        volume = describe_volume(aws, volume_id)
        self.volume_type = volume["VolumeType"]
        self.original = {"Iops": volume.get("Iops"), "Throughput": volume.get("Throughput")}
        self.wanted: dict[str, int] = {}
        if iops is not None:
            self.wanted["Iops"] = iops
        if throughput_mb_s is not None:
            self.wanted["Throughput"] = round(throughput_mb_s)
        if "Iops" in self.wanted and self.volume_type not in ("gp3", "io1", "io2"):
            raise InjectionError(f"iops-throttle: {volume_id} is {self.volume_type}; provisioned "
                                 "IOPS can be set on gp3, io1 and io2 only")  # fmt: skip
        if "Throughput" in self.wanted and self.volume_type != "gp3":
            raise InjectionError(f"iops-throttle: {volume_id} is {self.volume_type}; throughput "
                                 "can be set on gp3 only")  # fmt: skip

    def describe(self) -> str:
        change = ", ".join(f"{k} {self.original.get(k)} → {v}" for k, v in self.wanted.items())
        return (f"modify_volume {self.volume_id} of {self.instance.id} ({self.target}): {change}; "
                "later restore it (a second modification of the volume)")  # fmt: skip

    def revert_action(self) -> dict[str, Any]:
        restore = {k: self.original[k] for k in self.wanted if self.original.get(k) is not None}
        # Journaled just before the modification: the restore cannot succeed before then.
        if self.not_before is None:
            self.not_before = dt.datetime.now(dt.UTC) + MODIFICATION_COOLDOWN
        return {"action": "ec2.modify-volume", **self.aws.conn.to_action(),
                "volume_id": self.volume_id, "restore": restore,
                "not_before": self.not_before.isoformat(timespec="seconds")}  # fmt: skip

    def inject(self) -> None:
        if not self.one_way:
            raise InjectionError(f"iops-throttle by modify_volume refused, nothing changed: AWS "
                                 f"allows the restore of {self.volume_id} only 6 hours later; "
                                 "set one_way: true on the fault to go ahead")  # fmt: skip
        if not self.accept:
            refusal = modification_limit(self.aws, self.volume_id)
            if refusal:
                raise InjectionError(f"iops-throttle refused, nothing changed: {refusal}; set "
                                     f"{self.field}: true to go ahead anyway")  # fmt: skip
        self.aws.ec2("modify_volume", VolumeId=self.volume_id, **self.wanted)
        # New limits apply once the modification is optimizing, which may take longer than
        # the run's verification allows: waited for here, within `wait_timeout`.
        self.aws.wait(
            f"{self.volume_id} at {_limits(self.wanted)}",
            lambda: _reached(self.aws, self.volume_id, self.wanted),
        )

    def verify(self, timeout_s: float) -> bool:
        return self.aws.poll(
            f"{self.volume_id} at {self.wanted}",
            lambda: _reached(self.aws, self.volume_id, self.wanted),
            timeout_s,
        )

    def revert(self) -> None:
        restore_volume(self.aws, self.revert_action())


def _reached(aws: Aws, volume_id: str, wanted: dict[str, Any]) -> tuple[bool, str]:
    """Whether the volume performs at `wanted` (a modification counts once it is optimizing:
    the new limits apply from then)."""
    volume = describe_volume(aws, volume_id)
    if all(volume.get(k) == v for k, v in wanted.items()):
        return True, "done"
    for mod in _modifications(aws, volume_id):
        targets = {k: mod.get(f"Target{k}") for k in wanted}
        if targets == wanted and mod.get("ModificationState") in ("optimizing", "completed"):
            return True, mod["ModificationState"]
    return False, ", ".join(f"{k} {volume.get(k)}" for k in wanted)


def _modifications(aws: Aws, volume_id: str) -> list[dict[str, Any]]:
    try:
        found = aws.ec2("describe_volumes_modifications", VolumeIds=[volume_id])
    except AwsError as exc:
        if exc.code == "InvalidVolumeModification.NotFound":
            return []
        raise
    return list(found.get("VolumesModifications", []))


def modification_limit(aws: Aws, volume_id: str, now: dt.datetime | None = None) -> str | None:
    """Why modifying the volume now would run into AWS's modification limit, or None."""
    now = now or dt.datetime.now(dt.UTC)
    for mod in sorted(_modifications(aws, volume_id), key=lambda m: m.get("StartTime") or now,
                      reverse=True):  # fmt: skip
        state = mod.get("ModificationState", "?")
        started = mod.get("StartTime")
        started = started.astimezone(dt.UTC) if started is not None else None
        if state in ("modifying", "optimizing"):
            return (f"{volume_id} is still being modified ({state}); AWS refuses another "
                    "modification until it completes")  # fmt: skip
        if started is not None and now - started < MODIFICATION_COOLDOWN:
            again = started + MODIFICATION_COOLDOWN
            return (f"{volume_id} was modified at {started:%Y-%m-%d %H:%M:%S} UTC; AWS allows one "
                    "modification per volume per 6 hours, so the throttle or its restore would "
                    f"be refused before {again:%Y-%m-%d %H:%M:%S} UTC")  # fmt: skip
    return None


def restore_volume(aws: Aws, action: dict[str, Any]) -> str:
    """Put the volume's IOPS/throughput back. Repeatable: already there, nothing is done."""
    volume_id, restore = action["volume_id"], action["restore"]
    volume = describe_volume(aws, volume_id)
    if all(volume.get(k) == v for k, v in restore.items()):
        return f"{volume_id} already at {_limits(restore)}"
    try:
        aws.ec2("modify_volume", VolumeId=volume_id, **restore)
    except AwsError as exc:
        if exc.code in ("VolumeModificationRateExceeded", "IncorrectModificationState"):
            when = _earliest(action.get("not_before"))
            raise AwsError(f"{volume_id} could not be restored to {_limits(restore)} yet: "
                           f"{exc}; AWS allows the restore from {when}: run `rsdrill "
                           "recover` then (it stays owed)", exc.code) from None  # fmt: skip
        raise
    aws.wait(f"{volume_id} back at {_limits(restore)}", lambda: _reached(aws, volume_id, restore))
    return f"restored {volume_id} to {_limits(restore)}"


def _limits(values: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in values.items())


def _earliest(not_before: str | None) -> str:
    """The journal's earliest restore time, as the message says it."""
    if not not_before:
        return "the end of AWS's 6-hour modification cooldown"
    return f"{dt.datetime.fromisoformat(not_before):%Y-%m-%d %H:%M:%S} UTC"
