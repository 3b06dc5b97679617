"""`engine: fis`: the fault carried out by AWS Fault Injection Service. rsdrill creates an
experiment template for the one member (tagged with a token of the run), starts it, and on
revert stops the experiment if it still runs, makes sure a stopped instance runs again, and
deletes the template.

Actions used: aws:ec2:stop-instances (host-kill, with startInstancesAfterDuration),
aws:ebs:pause-volume-io (volume-detach: the volume stops answering without being detached),
aws:ebs:volume-io-latency (iops-throttle and disk-fault with `latency`), and
aws:ssm:send-command of AWS's own documents, run by the instance's SSM agent:
AWSFIS-Run-Network-Latency or -Packet-Loss (network-degrade: netem on the instance's
interface), AWSFIS-Run-CPU-Stress and -Memory-Stress (cpu-starve, memory-pressure: stress-ng
beside mongod) and AWSFIS-Run-Disk-Fill (disk-fill: the root volume). FIS has no DryRun flag.
"""

from __future__ import annotations

import json
import math
import secrets
from dataclasses import dataclass
from typing import Any

from rsdrill.platforms.ec2.client import Aws, AwsError
from rsdrill.platforms.ec2.instance import start_instance
from rsdrill.platforms.ec2.lookup import Instance, describe_instance
from rsdrill.platforms.stress import cpu_workers

TOKEN_TAG = "rsdrill:fis"
_ENDED = ("completed", "stopped", "failed", "cancelled")


def iso_duration(seconds: float) -> str:
    """FIS durations are ISO 8601: 90 → PT90S, 120 → PT2M (at least one second)."""
    whole = max(1, math.ceil(seconds))
    return f"PT{whole // 60}M" if whole % 60 == 0 else f"PT{whole}S"


@dataclass(frozen=True)
class FisAction:
    """One FIS action on one resource of the member."""

    action_id: str
    parameters: dict[str, str]
    resource_type: str  # aws:ec2:instance | aws:ec2:ebs-volume
    resource_arn: str
    target_name: str  # the action's target key: Instances | Volumes


def stop_instances(aws: Aws, instance: Instance, restart_after_s: float) -> FisAction:
    return FisAction("aws:ec2:stop-instances",
                     {"startInstancesAfterDuration": iso_duration(restart_after_s)},
                     "aws:ec2:instance", instance.arn(aws), "Instances")  # fmt: skip


def _volume_arn(aws: Aws, instance: Instance, volume_id: str) -> str:
    return f"arn:{aws.partition}:ec2:{aws.conn.region}:{instance.owner_id}:volume/{volume_id}"


def pause_volume_io(aws: Aws, instance: Instance, volume_id: str, duration_s: float) -> FisAction:
    return FisAction(
        "aws:ebs:pause-volume-io",
        {"duration": iso_duration(duration_s)},
        "aws:ec2:ebs-volume",
        _volume_arn(aws, instance, volume_id),
        "Volumes",
    )


def volume_io_latency(
    aws: Aws,
    instance: Instance,
    volume_id: str,
    *,
    duration_s: float,
    latency_s: float,
    probability: float,
    operations: tuple[str, ...],
) -> FisAction:
    latency_ms = str(max(1, round(latency_s * 1000)))
    percent = f"{probability * 100:g}"
    reads = "any" in operations or "read" in operations
    writes = "any" in operations or bool({"write", "fsync"} & set(operations))
    parameters = {"duration": iso_duration(duration_s)}
    if reads:
        parameters |= {"readIOPercentage": percent, "readIOLatencyMilliseconds": latency_ms}
    if writes:
        parameters |= {"writeIOPercentage": percent, "writeIOLatencyMilliseconds": latency_ms}
    return FisAction("aws:ebs:volume-io-latency", parameters, "aws:ec2:ebs-volume",
                     _volume_arn(aws, instance, volume_id), "Volumes")  # fmt: skip


def _send_command(
    aws: Aws, instance: Instance, document: str, duration_s: float, **parameters: str
) -> FisAction:
    """aws:ssm:send-command of AWS's `document` on the instance for the duration (the
    document's own DurationSeconds too), installing what it needs (stress-ng, tc...)."""
    seconds = str(max(1, math.ceil(duration_s)))
    document_parameters = {**parameters, "DurationSeconds": seconds, "InstallDependencies": "True"}
    arn = f"arn:{aws.partition}:ssm:{aws.conn.region}::document/{document}"
    action_parameters = {"documentArn": arn, "documentParameters": json.dumps(document_parameters),
                         "duration": iso_duration(duration_s)}  # fmt: skip
    return FisAction("aws:ssm:send-command", action_parameters, "aws:ec2:instance",
                     instance.arn(aws), "Instances")  # fmt: skip


def ssm_network_degrade(
    aws: Aws,
    instance: Instance,
    *,
    duration_s: float,
    latency_s: float | None,
    loss: float | None,
    interface: str,
) -> FisAction:
    """AWSFIS-Run-Network-Latency (`latency_s`) or AWSFIS-Run-Network-Packet-Loss (`loss`) on
    the instance's `interface`: netem on what it sends, for the duration."""
    if latency_s is not None:
        delay = str(max(1, round(latency_s * 1000)))
        return _send_command(aws, instance, "AWSFIS-Run-Network-Latency", duration_s,
                             Interface=interface, DelayMilliseconds=delay)  # fmt: skip
    assert loss is not None  # the ec2 check requires one of them
    return _send_command(aws, instance, "AWSFIS-Run-Network-Packet-Loss", duration_s,
                         Interface=interface, LossPercent=f"{loss * 100:g}")  # fmt: skip


@dataclass(frozen=True)
class InstanceSize:
    """What the instance's type offers, as EC2 describes it."""

    vcpus: int
    memory_mib: int


def instance_size(aws: Aws, instance: Instance) -> InstanceSize:
    """The vCPUs and memory of the instance's type (DescribeInstanceTypes)."""
    found = aws.ec2("describe_instance_types", InstanceTypes=[instance.instance_type])
    types = found.get("InstanceTypes") or []
    if not types:
        raise AwsError(f"InvalidInstanceType: EC2 does not describe instance type "
                       f"{instance.instance_type!r} of {instance.id}",
                       "InvalidInstanceType")  # fmt: skip
    described = types[0]
    return InstanceSize(int(described["VCpuInfo"]["DefaultVCpus"]),
                        int(described["MemoryInfo"]["SizeInMiB"]))  # fmt: skip


def ssm_cpu_stress(
    aws: Aws, instance: Instance, size: InstanceSize, *, duration_s: float, cpu_share: float
) -> FisAction:
    """AWSFIS-Run-CPU-Stress: stress-ng workers at full load, as many per vCPU as leave a busy
    mongod thread about `cpu_share` of a CPU (`cpu_workers`)."""
    workers = cpu_workers(cpu_share, size.vcpus)
    return _send_command(aws, instance, "AWSFIS-Run-CPU-Stress", duration_s, CPU=str(workers),
                         LoadPercent="100")  # fmt: skip


def ssm_memory_stress(
    aws: Aws, instance: Instance, size: InstanceSize, *, duration_s: float, memory_limit_mb: float
) -> FisAction:
    """AWSFIS-Run-Memory-Stress: one stress-ng worker takes the instance's memory less
    `memory_limit_mb`, as the document's Percent (a whole percentage) of its memory."""
    percent = math.floor(100 * (1 - memory_limit_mb / size.memory_mib))
    if percent < 1:
        raise AwsError(f"InvalidParameter: memory_limit_mb {memory_limit_mb:g} leaves less than "
                       f"1 % of the {size.memory_mib} MiB of {instance.instance_type} to take",
                       "InvalidParameter")  # fmt: skip
    return _send_command(aws, instance, "AWSFIS-Run-Memory-Stress", duration_s,
                         Percent=str(percent), Workers="1")  # fmt: skip


def ssm_disk_fill(
    aws: Aws, instance: Instance, *, duration_s: float, fill_percent: float
) -> FisAction:
    """AWSFIS-Run-Disk-Fill: the instance's root volume filled to `fill_percent` (the
    document's Percent, a whole percentage)."""
    percent = str(max(1, round(fill_percent)))
    return _send_command(aws, instance, "AWSFIS-Run-Disk-Fill", duration_s, Percent=percent)


class FisExperiment:
    """A fault run by FIS on one member."""

    def __init__(
        self,
        aws: Aws,
        instance: Instance,
        kind: str,
        action: FisAction,
        role_arn: str,
        *,
        stop_alarm_arn: str | None = None,
    ) -> None:
        self.aws = aws
        self.instance = instance
        self.target = instance.member
        self.kind = kind
        self.action = action
        self.role_arn = role_arn
        self.stop_alarm_arn = stop_alarm_arn
        self.token = secrets.token_hex(8)
        self.template_id: str | None = None
        self.experiment_id: str | None = None

    def describe(self) -> str:
        params = ", ".join(f"{k}={v}" for k, v in self.action.parameters.items())
        return (f"FIS experiment {self.action.action_id} ({params}) on {self.action.resource_arn} "
                f"({self.target}); later stop it and delete its template")  # fmt: skip

    def revert_action(self) -> dict[str, Any]:
        return {"action": "ec2.stop-fis-experiment", **self.aws.conn.to_action(),
                "token": self.token,
                "instance_id": self.instance.id if self.kind == "host-kill" else None}  # fmt: skip

    def template_request(self) -> dict[str, Any]:
        """The CreateExperimentTemplate parameters: one action on the member's resource."""
        name = self.action.target_name
        return {
            "clientToken": self.token,
            "description": f"rsdrill {self.kind} of {self.target}",
            "roleArn": self.role_arn,
            "stopConditions": self._stop_conditions(),
            "targets": {name: {"resourceType": self.action.resource_type,
                               "resourceArns": [self.action.resource_arn],
                               "selectionMode": "ALL"}},
            "actions": {"fault": {"actionId": self.action.action_id,
                                  "parameters": self.action.parameters,
                                  "targets": {name: name}}},
            "tags": self._tags(),
        }  # fmt: skip

    def _stop_conditions(self) -> list[dict[str, str]]:
        if self.stop_alarm_arn is None:
            return [{"source": "none"}]
        return [{"source": "aws:cloudwatch:alarm", "value": self.stop_alarm_arn}]

    def _tags(self) -> dict[str, str]:
        return {TOKEN_TAG: self.token, "rsdrill:member": self.target}

    def inject(self) -> None:
        template = self.aws.fis("create_experiment_template", **self.template_request())[
            "experimentTemplate"
        ]
        self.template_id = template["id"]
        try:
            experiment = self.aws.fis(
                "start_experiment",
                clientToken=f"{self.token}-run",
                experimentTemplateId=self.template_id,
                tags=self._tags(),
            )
        except AwsError:
            self._delete_template()
            raise
        self.experiment_id = experiment["experiment"]["id"]

    def verify(self, timeout_s: float) -> bool:
        def check() -> tuple[bool, str]:
            state, reason = self._experiment_state()
            if state in ("failed", "cancelled", "stopped"):
                # Stopped before it was seen in force: its stop condition fired (or someone
                # stopped it); either way the fault did not take effect as planned.
                raise AwsError(f"FIS experiment {self.experiment_id} {state}"
                               f"{f': {reason}' if reason else ''}", "FisFailed")  # fmt: skip
            if state != "running" and state not in _ENDED:
                return False, state
            if self.kind == "host-kill":
                instance_state = describe_instance(self.aws, self.instance.id).state
                return instance_state in ("stopping", "stopped"), f"{state}, {instance_state}"
            return True, state

        return self.aws.poll(f"FIS experiment {self.experiment_id} running", check, timeout_s)

    def _experiment_state(self) -> tuple[str, str]:
        """The experiment's status and FIS's reason for it."""
        state = self.aws.fis("get_experiment", id=self.experiment_id)["experiment"]["state"]
        return str(state["status"]), str(state.get("reason") or "")

    def revert(self) -> None:
        if self.experiment_id is not None and self._experiment_state()[0] not in _ENDED:
            self.aws.fis("stop_experiment", id=self.experiment_id)
        if self.kind == "host-kill":
            start_instance(self.aws, self.instance.id, {})
        self._delete_template()

    def _delete_template(self) -> None:
        if self.template_id is None:
            return
        try:
            self.aws.fis("delete_experiment_template", id=self.template_id)
        except AwsError as exc:
            if exc.code != "ResourceNotFoundException":
                raise
        self.template_id = None


def stop_fis_experiment(aws: Aws, action: dict[str, Any]) -> str:
    """From the journal alone: stop the run's experiments (found by their token tag), start the
    instance if it is stopped, delete the templates. Repeatable."""
    token = action["token"]
    done = []
    for experiment in _tagged(aws, "list_experiments", "experiments", token):
        if experiment["state"]["status"] not in _ENDED:
            aws.fis("stop_experiment", id=experiment["id"])
            done.append(f"stopped FIS experiment {experiment['id']}")
    if action.get("instance_id"):
        done.append(start_instance(aws, action["instance_id"], {}))
    for template in _tagged(aws, "list_experiment_templates", "experimentTemplates", token):
        aws.fis("delete_experiment_template", id=template["id"])
        done.append(f"deleted FIS template {template['id']}")
    return "; ".join(done) or f"nothing left of FIS run {token}"


def _tagged(aws: Aws, operation: str, key: str, token: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    params: dict[str, Any] = {}
    while True:
        page = aws.fis(operation, **params)
        found += [item for item in page.get(key, [])
                  if item.get("tags", {}).get(TOKEN_TAG) == token]  # fmt: skip
        if not page.get("nextToken"):
            return found
        params["nextToken"] = page["nextToken"]
