"""The AWS answers moto does not give, from botocore's Stubber: `engine: fis` through a whole
experiment's life (moto has no StartExperiment), and EBS refusing a volume's second
modification within 6 hours (moto never refuses it). Every request rsdrill makes is checked
against the service model by botocore before the stub answers, and every stubbed answer
against the model's output shape. EC2's side of FIS (the instance it stops) is moto's server.

Covered: create template → start → poll → stop → delete; the stop condition; the template
refused; the start refused; the experiment failed; and a run killed with the experiment
running, which `rsdrill recover` stops from the journal alone; a throttle's restore refused
by AWS's 6-hour rule, which `rsdrill recover` reports with the time it can succeed."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import ANY, Stubber
from harness.injectors import instance_injector
from harness.moto_ec2 import REGION, Member, instance_of
from typer.testing import CliRunner

from rsdrill.cli.app import app
from rsdrill.engine.journal import Journal
from rsdrill.platforms.base import InjectionError
from rsdrill.platforms.ec2 import client as aws_client
from rsdrill.platforms.ec2.client import Connection
from rsdrill.platforms.ec2.fis import (
    FisExperiment,
    instance_size,
    pause_volume_io,
    ssm_cpu_stress,
    ssm_disk_fill,
    ssm_memory_stress,
    stop_instances,
)
from rsdrill.platforms.ec2.injectors import Aws, AwsError
from rsdrill.platforms.ec2.lookup import Instance, find_instance
from rsdrill.platforms.ec2.options import MemberInstances
from rsdrill.platforms.ec2.ssm import cgroup_io_scripts, freeze_scripts

ROLE = "arn:aws:iam::123456789012:role/fis"
ALARM = "arn:aws:cloudwatch:us-east-1:123456789012:alarm:rs-writes-failing"
TEMPLATE_ID = "EXT1a2b3c4d5e6f7"
EXPERIMENT_ID = "EXP1a2b3c4d5e6f7"
NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


@pytest.fixture
def fis() -> Iterator[tuple[Any, Stubber]]:
    """A FIS client that answers only what the test queued (and checks every request)."""
    client = boto3.client("fis", region_name=REGION, aws_access_key_id="AKIAX",
                          aws_secret_access_key="x")  # fmt: skip
    with Stubber(client) as stubber:
        yield client, stubber
        stubber.assert_no_pending_responses()


def experiment(
    aws: Aws, m: Member, fis_client: Any, kind: str = "volume-detach", **options: Any
) -> FisExperiment:
    aws._clients["fis"] = fis_client
    instance = find_instance(aws, MemberInstances(by="tag"), m.host)
    if kind == "host-kill":
        action = stop_instances(aws, instance, 90)
    elif kind == "cpu-starve":
        action = ssm_cpu_stress(aws, instance, instance_size(aws, instance), duration_s=30,
                                cpu_share=0.05)  # fmt: skip
    elif kind == "memory-pressure":
        action = ssm_memory_stress(aws, instance, instance_size(aws, instance), duration_s=30,
                                   memory_limit_mb=1)  # fmt: skip
    elif kind == "disk-fill":
        action = ssm_disk_fill(aws, instance, duration_s=30, fill_percent=100)
    else:
        action = pause_volume_io(aws, instance, m.volume_id, 30)
    return FisExperiment(aws, instance, kind, action, ROLE, **options)


def _experiment(status: str, reason: str = "", token: str = "") -> dict[str, Any]:
    state = {"status": status, **({"reason": reason} if reason else {})}
    return {"id": EXPERIMENT_ID, "experimentTemplateId": TEMPLATE_ID, "state": state,
            "creationTime": NOW, "tags": {"rsdrill:fis": token} if token else {}}  # fmt: skip


def expect_create(stubber: Stubber, fault: FisExperiment, stop: list[dict[str, str]]) -> None:
    action = fault.action
    stubber.add_response(
        "create_experiment_template",
        {"experimentTemplate": {"id": TEMPLATE_ID, "roleArn": ROLE}},
        {
            "clientToken": fault.token,
            "description": ANY,
            "roleArn": ROLE,
            "stopConditions": stop,
            "targets": {action.target_name: {"resourceType": action.resource_type,
                                             "resourceArns": [action.resource_arn],
                                             "selectionMode": "ALL"}},
            "actions": {"fault": {"actionId": action.action_id, "parameters": action.parameters,
                                  "targets": {action.target_name: action.target_name}}},
            "tags": {"rsdrill:fis": fault.token, "rsdrill:member": fault.target},
        },
    )  # fmt: skip


def expect_start(stubber: Stubber, fault: FisExperiment) -> None:
    stubber.add_response(
        "start_experiment",
        {"experiment": _experiment("initiating", token=fault.token)},
        {"clientToken": f"{fault.token}-run", "experimentTemplateId": TEMPLATE_ID,
         "tags": {"rsdrill:fis": fault.token, "rsdrill:member": fault.target}},
    )  # fmt: skip


def expect_state(stubber: Stubber, status: str, reason: str = "") -> None:
    stubber.add_response("get_experiment", {"experiment": _experiment(status, reason)},
                         {"id": EXPERIMENT_ID})  # fmt: skip


def expect_stop(stubber: Stubber) -> None:
    stubber.add_response("stop_experiment", {"experiment": _experiment("stopping")},
                         {"id": EXPERIMENT_ID})  # fmt: skip


def expect_delete(stubber: Stubber) -> None:
    deleted = {"experimentTemplate": {"id": TEMPLATE_ID}}
    stubber.add_response("delete_experiment_template", deleted, {"id": TEMPLATE_ID})


def test_a_paused_volume_runs_its_whole_life(
    aws: Aws, member: Callable[..., Member], fis: tuple[Any, Stubber]
) -> None:
    client, stubber = fis
    fault = experiment(aws, member(), client)
    expect_create(stubber, fault, [{"source": "none"}])
    expect_start(stubber, fault)
    expect_state(stubber, "initiating")
    expect_state(stubber, "running")
    fault.inject()
    assert fault.verify(5.0)
    expect_state(stubber, "running")
    expect_stop(stubber)
    expect_delete(stubber)
    fault.revert()
    assert fault.template_id is None


@pytest.mark.parametrize("kind", ["cpu-starve", "memory-pressure", "disk-fill"])
def test_a_stress_or_disk_fill_runs_its_whole_life(
    aws: Aws, member: Callable[..., Member], fis: tuple[Any, Stubber], kind: str
) -> None:
    """The SSM document's experiment: created as built, started, running, stopped on revert
    while it still runs (the document's own DurationSeconds would end it too), deleted."""
    client, stubber = fis
    fault = experiment(aws, member(), client, kind)
    assert fault.action.action_id == "aws:ssm:send-command"
    expect_create(stubber, fault, [{"source": "none"}])
    expect_start(stubber, fault)
    expect_state(stubber, "running")
    fault.inject()
    assert fault.verify(5.0)
    assert fault.revert_action() == {"action": "ec2.stop-fis-experiment",
                                     **aws.conn.to_action(), "token": fault.token,
                                     "instance_id": None}  # fmt: skip
    expect_state(stubber, "running")
    expect_stop(stubber)
    expect_delete(stubber)
    fault.revert()
    assert fault.template_id is None


def test_a_host_kill_waits_for_the_instance_and_starts_it_again(
    aws: Aws, ec2: Any, member: Callable[..., Member], fis: tuple[Any, Stubber]
) -> None:
    client, stubber = fis
    m = member()
    fault = experiment(aws, m, client, kind="host-kill")
    expect_create(stubber, fault, [{"source": "none"}])
    expect_start(stubber, fault)
    fault.inject()
    expect_state(stubber, "running")  # FIS says running, the instance still runs
    assert not fault.verify(0.0)  # one look, no wait
    ec2.stop_instances(InstanceIds=[m.instance_id], Force=True)  # what FIS does
    expect_state(stubber, "running")
    assert fault.verify(5.0)
    expect_state(stubber, "running")
    expect_stop(stubber)
    expect_delete(stubber)
    fault.revert()
    assert instance_of(ec2, m.instance_id)["State"]["Name"] == "running"


def test_the_stop_condition_goes_into_the_template_and_its_firing_is_an_error(
    aws: Aws, member: Callable[..., Member], fis: tuple[Any, Stubber]
) -> None:
    client, stubber = fis
    fault = experiment(aws, member(), client, stop_alarm_arn=ALARM)
    expect_create(stubber, fault, [{"source": "aws:cloudwatch:alarm", "value": ALARM}])
    expect_start(stubber, fault)
    fault.inject()
    expect_state(stubber, "stopped", "Experiment stopped by stop condition")
    with pytest.raises(AwsError, match=f"{EXPERIMENT_ID} stopped: .*by stop condition"):
        fault.verify(5.0)
    expect_state(stubber, "stopped")  # ended: nothing to stop, the template goes
    expect_delete(stubber)
    fault.revert()


def test_a_refused_template_starts_nothing(
    aws: Aws, member: Callable[..., Member], fis: tuple[Any, Stubber]
) -> None:
    client, stubber = fis
    fault = experiment(aws, member(), client)
    stubber.add_client_error("create_experiment_template", "ValidationException",
                             "The role cannot be assumed by FIS", 400)  # fmt: skip
    with pytest.raises(AwsError, match=r"^ValidationException: fis:CreateExperimentTemplate: "
                       "The role cannot be assumed"):  # fmt: skip
        fault.inject()
    assert (fault.template_id, fault.experiment_id) == (None, None)
    fault.revert()  # nothing to stop or delete: no call is queued


def test_a_refused_start_deletes_the_template(
    aws: Aws, member: Callable[..., Member], fis: tuple[Any, Stubber]
) -> None:
    client, stubber = fis
    fault = experiment(aws, member(), client)
    expect_create(stubber, fault, [{"source": "none"}])
    stubber.add_client_error("start_experiment", "ServiceQuotaExceededException",
                             "too many running experiments", 402)  # fmt: skip
    expect_delete(stubber)
    with pytest.raises(AwsError, match="ServiceQuotaExceededException"):
        fault.inject()
    assert fault.template_id is None


def test_a_failed_experiment_is_an_error_and_its_template_goes(
    aws: Aws, member: Callable[..., Member], fis: tuple[Any, Stubber]
) -> None:
    client, stubber = fis
    fault = experiment(aws, member(), client)
    expect_create(stubber, fault, [{"source": "none"}])
    expect_start(stubber, fault)
    fault.inject()
    expect_state(stubber, "failed", "Target resolution failed")
    with pytest.raises(AwsError, match="failed: Target resolution failed"):
        fault.verify(5.0)
    expect_state(stubber, "failed")
    expect_delete(stubber)
    fault.revert()


def test_recover_stops_the_experiment_of_a_killed_run(
    aws: Aws, ec2: Any, member: Callable[..., Member], fis: tuple[Any, Stubber],
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    client, stubber = fis
    m = member()
    fault = experiment(aws, m, client, kind="host-kill")
    expect_create(stubber, fault, [{"source": "none"}])
    expect_start(stubber, fault)
    monkeypatch.setenv("RSDRILL_HOME", str(tmp_path / "home"))
    journal = Journal.open_run("killed-fis", "fis-kill")
    journal.write("intent", key="fault:0", kind=fault.kind, target=fault.target,
                  revert=fault.revert_action())  # fmt: skip
    fault.inject()
    journal.write("applied", key="fault:0")
    journal.close()
    ec2.stop_instances(InstanceIds=[m.instance_id], Force=True)
    # The run is dead: recover reads the journal, makes its own clients and finds the run's
    # experiment and template by their token tag (among others', over two pages).
    make_client = aws_client._make_client
    monkeypatch.setattr(aws_client, "_make_client", lambda conn, service: (
        client if service == "fis" else make_client(conn, service)))  # fmt: skip
    other = {**_experiment("running", token="someone-else"), "id": "EXPother"}
    stubber.add_response("list_experiments", {"experiments": [other], "nextToken": "p2"}, {})
    stubber.add_response("list_experiments",
                         {"experiments": [_experiment("running", token=fault.token)]},
                         {"nextToken": "p2"})  # fmt: skip
    expect_stop(stubber)
    stubber.add_response("list_experiment_templates", {"experimentTemplates": [
        {"id": TEMPLATE_ID, "tags": {"rsdrill:fis": fault.token}},
        {"id": "EXTother", "tags": {"rsdrill:fis": "someone-else"}}]}, {})  # fmt: skip
    expect_delete(stubber)
    # The journal's pid is this (living) process: --force says it is dead all the same.
    recovered = CliRunner().invoke(app, ["recover", "--force"])
    assert recovered.exit_code == 0, recovered.output
    assert f"stopped FIS experiment {EXPERIMENT_ID}" in recovered.output
    assert f"deleted FIS template {TEMPLATE_ID}" in recovered.output
    assert "EXPother" not in recovered.output
    assert instance_of(ec2, m.instance_id)["State"]["Name"] == "running"
    assert "nothing to recover" in CliRunner().invoke(app, ["recover"]).output


def test_recover_says_when_a_refused_volume_restore_can_succeed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ec2 = boto3.client("ec2", region_name=REGION, aws_access_key_id="AKIAX",
                       aws_secret_access_key="x")  # fmt: skip
    monkeypatch.setattr(aws_client, "_make_client", lambda conn, service: ec2)
    monkeypatch.setenv("RSDRILL_HOME", str(tmp_path / "home"))
    volume = {"VolumeId": "vol-0123456789abcdef0", "VolumeType": "gp3", "Iops": 3000,
              "Throughput": 125, "State": "in-use", "Size": 20}  # fmt: skip
    journal = Journal.open_run("throttled", "ebs-throttle")
    journal.write("intent", key="fault:0", kind="iops-throttle", target="db1:27017", revert={
        "action": "ec2.modify-volume", "connection": {"region": REGION},
        "volume_id": volume["VolumeId"], "restore": {"Iops": 6000, "Throughput": 500},
        "not_before": "2026-01-01T06:00:00+00:00"})  # fmt: skip
    journal.write("applied", key="fault:0")
    journal.close()
    with Stubber(ec2) as stubber:
        stubber.add_response("describe_volumes", {"Volumes": [volume]},
                             {"VolumeIds": [volume["VolumeId"]]})  # fmt: skip
        stubber.add_client_error(
            "modify_volume", "VolumeModificationRateExceeded",
            "You've reached the maximum modification rate per volume limit.", 400,
            expected_params={"VolumeId": volume["VolumeId"], "Iops": 6000, "Throughput": 500},
        )  # fmt: skip
        recovered = CliRunner().invoke(app, ["recover", "--force"])
        stubber.assert_no_pending_responses()
    assert recovered.exit_code == 4
    assert "AWS allows the restore from 2026-01-01 06:00:00 UTC: run `rsdrill recover` then" in (
        recovered.output)  # fmt: skip
    # Still owed: the next recover tries again.
    owed = CliRunner().invoke(app, ["recover", "--dry-run", "--force"]).output
    assert "would ec2.modify-volume" in owed


# -- engine: ssm -------------------------------------------------------------------------------

SSM_FILE = """\
name: ssm
target:
  platform: ec2
  uri: mongodb://db1:27017/?replicaSet=rs0
  ec2: {{region: us-east-1, dbpath: /data/db}}
faults:
  - {{at: 5s, duration: 30s, engine: ssm, {fault}}}
"""
COMMAND_ID = "8f3c6b2e-4d1a-4c7e-9b5f-0a1b2c3d4e5f"  # SSM's ids are 36-character UUIDs
INSTANCE = Instance(id="i-0123456789abcdef0", member="db1:27017", state="running",
                    owner_id="123456789012", availability_zone="us-east-1a", vpc_id="vpc-1",
                    security_groups=("sg-1",), network_interfaces=1, volumes={})  # fmt: skip


@pytest.fixture
def ssm() -> Iterator[tuple[Any, Stubber]]:
    client = boto3.client("ssm", region_name=REGION, aws_access_key_id="AKIAX",
                          aws_secret_access_key="x")  # fmt: skip
    with Stubber(client) as stubber:
        yield client, stubber
        stubber.assert_no_pending_responses()


def expect_command(stubber: Stubber, script: Any, *statuses: str, stderr: str = "") -> None:
    """One SendCommand of `script`, then GetCommandInvocation answering `statuses` in turn."""
    stubber.add_response(
        "send_command", {"Command": {"CommandId": COMMAND_ID}},
        {"InstanceIds": [INSTANCE.id], "DocumentName": "AWS-RunShellScript", "Comment": ANY,
         "TimeoutSeconds": 60, "Parameters": {"commands": [script]}},
    )  # fmt: skip
    for status in statuses:
        if status == "unknown":  # SSM has not registered the invocation yet
            stubber.add_client_error("get_command_invocation", "InvocationDoesNotExist", "", 400)
            continue
        answer = {"CommandId": COMMAND_ID, "InstanceId": INSTANCE.id, "Status": status,
                  "StandardOutputContent": "", "StandardErrorContent": stderr}  # fmt: skip
        stubber.add_response("get_command_invocation", answer,
                             {"CommandId": COMMAND_ID, "InstanceId": INSTANCE.id})  # fmt: skip


def ssm_fault(client: Any, fault: str) -> Any:
    from rsdrill.experiment.loader import load_experiment_text

    exp = load_experiment_text(SSM_FILE.format(fault=fault), "ssm.yaml")
    assert exp.target.ec2 is not None
    aws = Aws(Connection(REGION, poll_interval=0.01))
    aws._clients["ssm"] = client
    return instance_injector(aws, exp.target.ec2, exp.faults[0], INSTANCE)


def test_an_ssm_iops_cap_is_exact_and_lifted_on_revert(ssm: tuple[Any, Stubber]) -> None:
    client, stubber = ssm
    fault = ssm_fault(client, "kind: iops-throttle, read_iops: 100, write_mb_s: 2")
    scripts = fault.scripts
    assert 'echo "$dev riops=100 wbps=2097152" > "$v2/io.max"' in scripts.inject
    assert 'echo "$dev 100" > "$v1/blkio.throttle.read_iops_device"' in scripts.inject
    assert "findmnt -no SOURCE -T /data/db" in scripts.inject
    assert 'echo "$dev riops=max wbps=max" > "$v2/io.max"' in scripts.revert
    assert 'echo "$dev 0" > "$v1/blkio.throttle.write_bps_device"' in scripts.revert
    for script in (scripts.inject, scripts.check, scripts.revert):
        assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    expect_command(stubber, scripts.inject, "unknown", "InProgress", "Success")
    fault.inject()
    expect_command(stubber, scripts.check, "Success")
    assert fault.verify(5.0)
    expect_command(stubber, scripts.revert, "Success")
    fault.revert()


def test_an_ssm_command_that_fails_says_why(ssm: tuple[Any, Stubber]) -> None:
    client, stubber = ssm
    fault = ssm_fault(client, "kind: iops-throttle, write_iops: 50")
    expect_command(stubber, fault.scripts.inject, "Failed",
                   stderr="no cgroup I/O controller for 1234")  # fmt: skip
    with pytest.raises(InjectionError, match=r"SSM command Failed: no cgroup I/O controller"):
        fault.inject()


def test_ssm_iops_needs_separate_read_and_write_caps() -> None:
    from rsdrill.experiment.loader import ExperimentError, load_experiment_text

    with pytest.raises(ExperimentError, match=r"faults\[0\].iops: cgroup io.max \(engine ssm\) "
                       "caps reads and writes separately"):  # fmt: skip
        load_experiment_text(SSM_FILE.format(fault="kind: iops-throttle, iops: 100"), "s.yaml")
    # Without engine ssm, a freeze is refused with the way to get one.
    with pytest.raises(ExperimentError, match="host-freeze on ec2 needs engine: ssm"):
        load_experiment_text(SSM_FILE.format(fault="kind: host-freeze").replace(
            "engine: ssm, ", ""), "s.yaml")  # fmt: skip


def test_recover_runs_the_journaled_ssm_revert(
    ssm: tuple[Any, Stubber], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client, stubber = ssm
    fault = ssm_fault(client, "kind: host-freeze")
    monkeypatch.setattr(aws_client, "_make_client", lambda conn, service: client)
    monkeypatch.setenv("RSDRILL_HOME", str(tmp_path / "home"))
    journal = Journal.open_run("frozen", "ssm-freeze")
    journal.write("intent", key="fault:0", kind=fault.kind, target=fault.target,
                  revert=fault.revert_action())  # fmt: skip
    journal.write("applied", key="fault:0")
    journal.close()
    expect_command(stubber, fault.scripts.revert, "Success")
    recovered = CliRunner().invoke(app, ["recover", "--force"])
    assert recovered.exit_code == 0, recovered.output
    assert f"revert host-freeze on {INSTANCE.id} (SSM Run Command)" in recovered.output


def test_the_freeze_scripts_stop_and_continue_a_real_process(tmp_path: Path) -> None:
    # A process with a name of its own, so that nothing else on the machine matches it.
    name = f"rsdfrz{os.getpid() % 100000}"
    shutil.copy("/bin/sleep", tmp_path / name)
    proc = subprocess.Popen([str(tmp_path / name), "60"])
    try:
        scripts = freeze_scripts(name)

        def sh(script: str) -> int:
            return subprocess.run(["sh", "-c", script], capture_output=True).returncode

        assert sh(scripts.check) != 0  # running: not in force
        assert sh(scripts.inject) == 0
        assert sh(scripts.check) == 0
        assert Path(f"/proc/{proc.pid}/stat").read_text().split()[2] == "T"
        assert sh(scripts.revert) == 0 and sh(scripts.revert) == 0  # repeatable
        assert sh(scripts.check) != 0
        assert Path(f"/proc/{proc.pid}/stat").read_text().split()[2] in ("S", "R")
    finally:
        proc.kill()
        proc.wait()


def test_the_cap_scripts_throttle_a_real_process_s_cgroup_and_lift_it(disk_tmp_path: Path) -> None:
    """The iops-throttle scripts run here as SSM runs them: the process (named as nothing else
    on the machine) in a blkio cgroup of this machine (cgroup v1, as on Amazon Linux 2), the
    cap on the disk holding dbpath; direct writes from that cgroup are capped, then free again
    after the revert (which can be run twice)."""
    from harness.cgroups import pod_cgroup, write_seconds

    name = f"rsdcap{os.getpid() % 100000}"
    shutil.copy("/bin/sleep", disk_tmp_path / name)
    scripts = cgroup_io_scripts(name, str(disk_tmp_path), {"wiops": 20, "rbps": 1 << 20})

    def sh(script: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["sh", "-c", script], capture_output=True, text=True)

    with pod_cgroup([str(disk_tmp_path / name), "600"]) as cgroup:
        blkio = cgroup.container / "blkio.throttle.write_iops_device"
        assert sh(scripts.check).returncode != 0  # not in force
        injected = sh(scripts.inject)
        assert injected.returncode == 0, injected.stderr
        assert sh(scripts.check).returncode == 0
        [(device, limit)] = [line.split() for line in blkio.read_text().splitlines()]
        assert limit == "20" and Path(f"/sys/dev/block/{device}").exists()
        read_bps = (cgroup.container / "blkio.throttle.read_bps_device").read_text().split()
        assert read_bps == [device, str(1 << 20)]
        # 40 writes at 20 a second: about 2 s (the kernel lets a first slice through).
        capped = write_seconds(cgroup.container, disk_tmp_path, 40)
        assert capped >= 1.0, f"capped writes took {capped:.2f}s"
        assert sh(scripts.revert).returncode == 0 and sh(scripts.revert).returncode == 0
        assert sh(scripts.check).returncode != 0
        assert blkio.read_text() == ""
        free = write_seconds(cgroup.container, disk_tmp_path, 40)
        assert free < capped / 2, f"after the revert {free:.2f}s, capped {capped:.2f}s"


def test_an_iops_throttle_that_names_no_engine_is_the_exact_ssm_cap() -> None:
    from rsdrill.experiment.catalog import way_of
    from rsdrill.experiment.loader import load_experiment_text
    from rsdrill.platforms.ec2.ssm import SsmFault

    text = SSM_FILE.format(fault="kind: iops-throttle, write_iops: 50")
    exp = load_experiment_text(text.replace("engine: ssm, ", ""), "s.yaml")
    fault = exp.faults[0]
    way = way_of("ec2", fault)
    assert fault.engine is None and way is not None
    assert (way.engine, way.support) == ("ssm", "exact")
    assert exp.target.ec2 is not None
    injector = instance_injector(Aws(Connection(REGION)), exp.target.ec2, fault, INSTANCE)
    assert isinstance(injector, SsmFault)
    assert 'echo "$dev wiops=50" > "$v2/io.max"' in injector.scripts.inject


def test_preflight_refuses_an_instance_ssm_does_not_manage(ssm: tuple[Any, Stubber]) -> None:
    from rsdrill.platforms.ec2.ssm import unmanaged

    client, stubber = ssm
    aws = Aws(Connection(REGION))
    aws._clients["ssm"] = client
    asked = {"Filters": [{"Key": "InstanceIds", "Values": [INSTANCE.id]}]}
    stubber.add_response("describe_instance_information", {"InstanceInformationList": []}, asked)
    assert "is not managed by SSM" in (unmanaged(aws, INSTANCE) or "")
    online = {"InstanceInformationList": [{"InstanceId": INSTANCE.id, "PingStatus": "Online"}]}
    stubber.add_response("describe_instance_information", online, asked)
    assert unmanaged(aws, INSTANCE) is None
