"""host-kill on EC2 through the API: stop (force) the member's instance and start it again on
revert — on its own data volume (keep) or on a fresh empty one (wipe: the member does a full
initial sync); or reboot it; or terminate it (only when the experiment allows it)."""

from __future__ import annotations

from typing import Any

from rsdrill.platforms.base import InjectionError
from rsdrill.platforms.ec2.client import Aws, AwsError
from rsdrill.platforms.ec2.lookup import Instance, describe_instance, describe_volume

# Tag on a fresh volume naming the data volume it replaced (and found again by a repeated revert).
REPLACES_TAG = "rsdrill:replaces"
_STOPPED = ("stopping", "stopped")


class InstanceKill:
    """Stop, reboot or terminate the member's instance."""

    kind = "host-kill"

    def __init__(
        self,
        aws: Aws,
        instance: Instance,
        *,
        action: str,
        force: bool,
        one_way: bool,
        restart: bool,
        replace_volume: tuple[str, str] | None,
    ) -> None:
        self.aws = aws
        self.instance = instance
        self.target = instance.member
        self.action = action
        self.force = force
        self.one_way = one_way
        self.restart = restart and action == "stop"
        # (volume id, device) of the data volume to swap for an empty one before the restart.
        self.replace_volume = replace_volume

    def describe(self) -> str:
        who = f"{self.instance.id} ({self.target})"
        if self.action == "reboot":
            return f"reboot {who}; it comes back by itself"
        if self.action == "terminate":
            return f"terminate {who}; it is gone for good"
        stop = f"stop{' (force)' if self.force else ''} {who}"
        if not self.restart:
            return f"{stop}; it stays stopped"
        if self.replace_volume:
            volume, device = self.replace_volume
            return (f"{stop}; later start it on a fresh empty volume at {device} "
                    f"(replacing {volume}, which is kept detached)")  # fmt: skip
        return f"{stop}; later start it on its own volumes"

    def revert_action(self) -> dict[str, Any] | None:
        if not self.restart:
            return None
        replace = None
        if self.replace_volume:
            replace = {"volume_id": self.replace_volume[0], "device": self.replace_volume[1]}
        return {"action": "ec2.start-instances", **self.aws.conn.to_action(),
                "instance_id": self.instance.id, "member": self.target,
                "replace_volume": replace}  # fmt: skip

    def inject(self) -> None:
        iid = self.instance.id
        if self.action == "terminate":
            if not self.one_way:
                raise InjectionError(f"host-kill terminate of {iid} refused: it cannot be "
                                     "undone; set one_way: true on the fault")  # fmt: skip
            self.aws.ec2("terminate_instances", InstanceIds=[iid])
        elif self.action == "reboot":
            self.aws.ec2("reboot_instances", InstanceIds=[iid])
        else:
            self.aws.ec2("stop_instances", InstanceIds=[iid], Force=self.force)

    def verify(self, timeout_s: float) -> bool:
        if self.action == "reboot":
            return True  # EC2 shows no state for a reboot: the probes see the member go
        wanted = ("shutting-down", "terminated") if self.action == "terminate" else _STOPPED

        def check() -> tuple[bool, str]:
            state = describe_instance(self.aws, self.instance.id).state
            return state in wanted, state

        return self.aws.poll(f"{self.instance.id} {'/'.join(wanted)}", check, timeout_s)

    def revert(self) -> None:
        start_instance(self.aws, self.instance.id, self.revert_action() or {})


def start_instance(aws: Aws, instance_id: str, action: dict[str, Any]) -> str:
    """Start a stopped instance (after replacing its data volume, if asked) and wait until it
    runs. Repeatable: a running instance, or a volume already replaced, is left as it is."""
    done = []
    state = _wait_settled(aws, instance_id)
    if state == "terminated":
        raise AwsError(f"{instance_id} is terminated: nothing to start", "Terminated")
    replace = action.get("replace_volume")
    if replace:
        if state != "stopped":
            if state in ("pending", "running"):
                # Started already: the replacement happened before the start, or never will.
                return f"{instance_id}: already {state}"
            raise AwsError(f"{instance_id} is {state}: cannot replace its data volume")
        done.append(replace_data_volume(aws, instance_id, replace["volume_id"], replace["device"]))
    if state in ("pending", "running"):
        done.append(f"{instance_id} already {state}")
    else:
        aws.ec2("start_instances", InstanceIds=[instance_id])
        done.append(f"started {instance_id}")

    def running() -> tuple[bool, str]:
        now = describe_instance(aws, instance_id).state
        return now == "running", now

    aws.wait(f"{instance_id} running", running)
    return "; ".join(done)


def _wait_settled(aws: Aws, instance_id: str) -> str:
    """The instance's state once it is no longer stopping (a force stop takes a while)."""

    def settled() -> tuple[bool, str]:
        state = describe_instance(aws, instance_id).state
        return state not in ("stopping", "shutting-down"), state

    return aws.wait(f"{instance_id} stopped", settled)


def replace_data_volume(aws: Aws, instance_id: str, old_volume: str, device: str) -> str:
    """Swap the stopped instance's data volume at `device` for a new empty one like it (same
    zone, type, size, IOPS, throughput, encryption, tags); the old one stays, detached.
    Repeatable: a replacement already attached, or created but not yet attached, is reused."""
    attached = describe_instance(aws, instance_id).volumes.get(device)
    if attached is not None and attached != old_volume:
        return f"{device} of {instance_id} already holds {attached} (replacing {old_volume})"
    if attached == old_volume:
        aws.ec2("detach_volume", VolumeId=old_volume, InstanceId=instance_id, Device=device)
        _wait_volume(aws, old_volume, "available")
    fresh = _replacement(aws, old_volume)
    if describe_volume(aws, fresh)["State"] != "in-use":
        aws.ec2("attach_volume", VolumeId=fresh, InstanceId=instance_id, Device=device)
    _wait_attached(aws, fresh, instance_id)
    return f"{device} of {instance_id}: fresh volume {fresh} replaces {old_volume} (kept detached)"


def _replacement(aws: Aws, old_volume: str) -> str:
    existing = aws.ec2("describe_volumes", Filters=[
        {"Name": f"tag:{REPLACES_TAG}", "Values": [old_volume]},
        {"Name": "status", "Values": ["creating", "available"]},
    ])["Volumes"]  # fmt: skip
    if existing:
        fresh = existing[0]["VolumeId"]
    else:
        old = describe_volume(aws, old_volume)
        params: dict[str, Any] = {
            "AvailabilityZone": old["AvailabilityZone"],
            "Size": old["Size"],
            "VolumeType": old["VolumeType"],
            "Encrypted": bool(old.get("Encrypted")),
        }
        if old["VolumeType"] in ("io1", "io2", "gp3") and old.get("Iops"):
            params["Iops"] = old["Iops"]
        if old["VolumeType"] == "gp3" and old.get("Throughput"):
            params["Throughput"] = old["Throughput"]
        if old.get("KmsKeyId"):
            params["KmsKeyId"] = old["KmsKeyId"]
        tags = [
            t
            for t in old.get("Tags", [])
            if not t["Key"].startswith("aws:") and t["Key"] != REPLACES_TAG
        ]
        tags.append({"Key": REPLACES_TAG, "Value": old_volume})
        params["TagSpecifications"] = [{"ResourceType": "volume", "Tags": tags}]
        fresh = aws.ec2("create_volume", **params)["VolumeId"]
    _wait_volume(aws, fresh, "available", also=("in-use",))
    return str(fresh)


def _wait_volume(aws: Aws, volume_id: str, state: str, also: tuple[str, ...] = ()) -> None:
    def check() -> tuple[bool, str]:
        now = describe_volume(aws, volume_id)["State"]
        return now in (state, *also), now

    aws.wait(f"{volume_id} {state}", check)


def _wait_attached(aws: Aws, volume_id: str, instance_id: str) -> None:
    def check() -> tuple[bool, str]:
        attachments = describe_volume(aws, volume_id).get("Attachments", [])
        mine = [a for a in attachments if a["InstanceId"] == instance_id]
        state = mine[0]["State"] if mine else "not attached"
        return state == "attached", state

    aws.wait(f"{volume_id} attached to {instance_id}", check)
