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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import ANY, Stubber
from harness.moto_ec2 import REGION, Member, instance_of
from typer.testing import CliRunner

from rsdrill.cli.app import app
from rsdrill.engine.journal import Journal
from rsdrill.platforms.ec2 import client as aws_client
from rsdrill.platforms.ec2.fis import FisExperiment, pause_volume_io, stop_instances
from rsdrill.platforms.ec2.injectors import Aws, AwsError
from rsdrill.platforms.ec2.lookup import find_instance
from rsdrill.platforms.ec2.options import MemberInstances

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
