"""Every EC2 fault against moto's server: the real state after inject and after revert (twice:
reverts are repeatable), refusals that change nothing, and the clear one-line errors."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from typing import Any

import pytest
from harness.injectors import instance_injector
from harness.moto_ec2 import DATA_DEVICE, Member, data_volume_at, instance_of, volume_of

from rsdrill.experiment.schema import make_fault
from rsdrill.platforms.base import InjectionError
from rsdrill.platforms.ec2.fis import (
    FisExperiment,
    InstanceSize,
    instance_size,
    iso_duration,
    pause_volume_io,
    ssm_network_degrade,
    stop_instances,
    volume_io_latency,
)
from rsdrill.platforms.ec2.injectors import REVERT_ACTIONS, Aws, AwsError, preflight
from rsdrill.platforms.ec2.instance import REPLACES_TAG, InstanceKill
from rsdrill.platforms.ec2.lookup import find_data_volume, find_instance
from rsdrill.platforms.ec2.network import SecurityGroupPartition
from rsdrill.platforms.ec2.options import (
    DataVolume,
    Ec2Fault,
    Ec2Platform,
    MemberInstances,
    iam_actions,
)
from rsdrill.platforms.ec2.volume import IopsThrottle, VolumeDetach, modification_limit

BY_TAG = MemberInstances(by="tag")
AT_SDF = DataVolume(device=DATA_DEVICE)


def state(ec2: Any, m: Member) -> str:
    return str(instance_of(ec2, m.instance_id)["State"]["Name"])


def kill(aws: Aws, m: Member, **options: Any) -> InstanceKill:
    settings = {"action": "stop", "force": True, "one_way": False, "restart": True,
                "replace_volume": None} | options  # fmt: skip
    return InstanceKill(aws, find_instance(aws, BY_TAG, m.host), **settings)


def test_members_map_to_instances_by_tag_ip_dns_and_map(
    aws: Aws, ec2: Any, member: Callable[..., Member]
) -> None:
    m = member()
    raw = instance_of(ec2, m.instance_id)
    assert find_instance(aws, BY_TAG, m.host).id == m.instance_id
    by_ip = find_instance(aws, MemberInstances(), f"{raw['PrivateIpAddress']}:27017")
    assert by_ip.id == m.instance_id
    by_dns = find_instance(aws, MemberInstances(by="private-dns"),
                           f"{raw['PrivateDnsName']}:27017")  # fmt: skip
    assert by_dns.id == m.instance_id
    mapped = MemberInstances(by="map", map={"db1:27017": m.instance_id})
    assert find_instance(aws, mapped, "db1:27017").id == m.instance_id
    instance = find_instance(aws, BY_TAG, m.host)
    assert find_data_volume(aws, AT_SDF, instance) == (m.volume_id, DATA_DEVICE)
    assert find_data_volume(aws, DataVolume(tag="rsdrill:data"), instance) == (
        m.volume_id, DATA_DEVICE)  # fmt: skip


def test_unknown_instance_and_member_are_clear_errors(aws: Aws) -> None:
    missing = MemberInstances(by="map", map={"db1:27017": "i-0123456789abcdef0"})
    with pytest.raises(AwsError, match=r"^InvalidInstanceID.NotFound: ec2:DescribeInstances: "):
        find_instance(aws, missing, "db1:27017")
    with pytest.raises(AwsError, match="0 instances match tag:rsdrill:member=nowhere:1"):
        find_instance(aws, BY_TAG, "nowhere:1")


def test_host_kill_stops_and_starts_the_instance(
    aws: Aws, ec2: Any, member: Callable[..., Member]
) -> None:
    m = member()
    fault = kill(aws, m)
    action = fault.revert_action()
    assert action is not None and action["action"] == "ec2.start-instances"
    fault.inject()
    assert fault.verify(5.0)
    assert state(ec2, m) == "stopped"
    fault.revert()
    assert state(ec2, m) == "running"
    assert data_volume_at(ec2, m.instance_id) == m.volume_id  # keep: the same volume
    assert "already running" in REVERT_ACTIONS["ec2.start-instances"](action)


def test_host_kill_wipe_restarts_on_a_fresh_volume(
    aws: Aws, ec2: Any, member: Callable[..., Member]
) -> None:
    m = member()
    fault = kill(aws, m, replace_volume=(m.volume_id, DATA_DEVICE))
    fault.inject()
    assert fault.verify(5.0)
    fault.revert()
    assert state(ec2, m) == "running"
    fresh = data_volume_at(ec2, m.instance_id)
    assert fresh is not None and fresh != m.volume_id
    tags = {t["Key"]: t["Value"] for t in volume_of(ec2, fresh).get("Tags", [])}
    assert tags[REPLACES_TAG] == m.volume_id and tags["rsdrill:data"] == m.host
    assert volume_of(ec2, fresh)["Iops"] == 6000  # made like the one it replaces
    assert volume_of(ec2, m.volume_id)["State"] == "available"  # the old data is kept
    # Repeated (as `rsdrill recover` would): nothing more happens.
    REVERT_ACTIONS["ec2.start-instances"](fault.revert_action() or {})
    assert data_volume_at(ec2, m.instance_id) == fresh


def test_terminate_is_refused_without_permission_and_nothing_changes(
    aws: Aws, ec2: Any, member: Callable[..., Member]
) -> None:
    m = member()
    fault = kill(aws, m, action="terminate", restart=False)
    assert fault.revert_action() is None
    with pytest.raises(InjectionError, match="set one_way: true on the fault"):
        fault.inject()
    assert state(ec2, m) == "running"
    allowed = kill(aws, m, action="terminate", one_way=True, restart=False)
    allowed.inject()
    assert allowed.verify(5.0)
    assert state(ec2, m) in ("shutting-down", "terminated")


def test_volume_detach_and_reattach_to_the_same_device(
    aws: Aws, ec2: Any, member: Callable[..., Member]
) -> None:
    m = member()
    fault = VolumeDetach(aws, find_instance(aws, BY_TAG, m.host), m.volume_id, DATA_DEVICE)
    fault.inject()
    assert fault.verify(5.0)
    assert volume_of(ec2, m.volume_id)["State"] == "available"
    assert data_volume_at(ec2, m.instance_id) is None
    fault.revert()
    attachment = volume_of(ec2, m.volume_id)["Attachments"][0]
    assert (attachment["InstanceId"], attachment["Device"], attachment["State"]) == (
        m.instance_id, DATA_DEVICE, "attached")  # fmt: skip
    assert "already attached" in REVERT_ACTIONS["ec2.attach-volume"](fault.revert_action())


def throttle(
    aws: Aws, m: Member, *, accept: bool = False, one_way: bool = True, **limits: Any
) -> IopsThrottle:
    instance = find_instance(aws, BY_TAG, m.host)
    return IopsThrottle(aws, instance, m.volume_id, iops=limits.get("iops"),
                        throughput_mb_s=limits.get("throughput_mb_s"),
                        accept_modification_limit=accept,
                        field="faults[0].ec2.accept_modification_limit",
                        one_way=one_way)  # fmt: skip


def test_iops_throttle_without_one_way_never_calls_modify_volume(
    aws: Aws, ec2: Any, member: Callable[..., Member]
) -> None:
    m = member()
    fault = throttle(aws, m, one_way=False, iops=3000)
    with pytest.raises(InjectionError, match="only 6 hours later; set one_way: true"):
        fault.inject()
    assert volume_of(ec2, m.volume_id)["Iops"] == 6000
    # No modification was ever asked for (moto records each one, as AWS does).
    assert ec2.describe_volumes_modifications(VolumeIds=[m.volume_id])[
        "VolumesModifications"] == []  # fmt: skip


def test_the_journaled_restore_holds_the_earliest_time_it_can_succeed(
    aws: Aws, member: Callable[..., Member]
) -> None:
    m = member()
    before = dt.datetime.now(dt.UTC)
    action = throttle(aws, m, iops=3000).revert_action()
    not_before = dt.datetime.fromisoformat(action["not_before"])
    after = dt.datetime.now(dt.UTC)
    assert before + dt.timedelta(hours=6, seconds=-1) <= not_before <= after + dt.timedelta(hours=6)


def test_iops_throttle_restores_the_volume_and_the_6_hour_rule_refuses_the_next(
    aws: Aws, ec2: Any, member: Callable[..., Member]
) -> None:
    m = member()
    fault = throttle(aws, m, iops=3000, throughput_mb_s=125)
    assert fault.revert_action()["restore"] == {"Iops": 6000, "Throughput": 500}
    fault.inject()
    assert fault.verify(5.0)
    assert (volume_of(ec2, m.volume_id)["Iops"], volume_of(ec2, m.volume_id)["Throughput"]) == (
        3000, 125)  # fmt: skip
    fault.revert()
    assert (volume_of(ec2, m.volume_id)["Iops"], volume_of(ec2, m.volume_id)["Throughput"]) == (
        6000, 500)  # fmt: skip
    modifications = len(ec2.describe_volumes_modifications(VolumeIds=[m.volume_id])
                        ["VolumesModifications"])  # fmt: skip

    # The volume was just modified: the next throttle is refused and changes nothing.
    again = throttle(aws, m, iops=3000)
    with pytest.raises(InjectionError) as refused:
        again.inject()
    message = str(refused.value)
    assert "nothing changed" in message and "one modification per volume per 6 hours" in message
    assert "faults[0].ec2.accept_modification_limit: true" in message
    assert volume_of(ec2, m.volume_id)["Iops"] == 6000
    after = ec2.describe_volumes_modifications(VolumeIds=[m.volume_id])["VolumesModifications"]
    assert len(after) == modifications
    # Its revert (the runner reverts a refused fault too) finds nothing to restore.
    assert "already at" in REVERT_ACTIONS["ec2.modify-volume"](again.revert_action())

    # Accepting the limit goes ahead (moto, like some accounts, does not enforce it).
    accepted = throttle(aws, m, iops=3000, accept=True)
    accepted.inject()
    assert accepted.verify(5.0) and volume_of(ec2, m.volume_id)["Iops"] == 3000
    accepted.revert()
    assert volume_of(ec2, m.volume_id)["Iops"] == 6000


def test_modification_limit_reads_the_volume_history(
    aws: Aws, ec2: Any, member: Callable[..., Member]
) -> None:
    m = member()
    assert modification_limit(aws, m.volume_id) is None  # never modified
    ec2.modify_volume(VolumeId=m.volume_id, Iops=5000)
    assert "per 6 hours" in (modification_limit(aws, m.volume_id) or "")
    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=6, minutes=1)
    assert modification_limit(aws, m.volume_id, now=later) is None


def test_iops_throttle_refuses_volume_types_without_provisioned_iops(
    aws: Aws, member: Callable[..., Member]
) -> None:
    m = member(volume_type="io1")
    with pytest.raises(InjectionError, match="throughput can be set on gp3 only"):
        throttle(aws, m, throughput_mb_s=100)


def test_network_partition_swaps_groups_and_restores_them(
    aws: Aws, ec2: Any, member: Callable[..., Member]
) -> None:
    m = member()
    fault = SecurityGroupPartition(aws, find_instance(aws, BY_TAG, m.host), outbound_too=True)
    fault.inject()
    assert fault.verify(5.0)
    groups = [g["GroupId"] for g in instance_of(ec2, m.instance_id)["SecurityGroups"]]
    assert groups != [m.group_id] and len(groups) == 1
    deny = ec2.describe_security_groups(GroupIds=groups)["SecurityGroups"][0]
    assert deny["GroupName"] == fault.group_name
    assert deny["IpPermissions"] == [] and deny["IpPermissionsEgress"] == []
    fault.revert()
    assert [g["GroupId"] for g in instance_of(ec2, m.instance_id)["SecurityGroups"]] == [m.group_id]
    left = ec2.describe_security_groups(
        Filters=[{"Name": "group-name", "Values": [fault.group_name]}]
    )["SecurityGroups"]
    assert left == []
    assert "already in" in REVERT_ACTIONS["ec2.restore-security-groups"](fault.revert_action())


def test_inbound_partition_keeps_outbound_traffic(
    aws: Aws, ec2: Any, member: Callable[..., Member]
) -> None:
    m = member()
    fault = SecurityGroupPartition(aws, find_instance(aws, BY_TAG, m.host), outbound_too=False)
    fault.inject()
    group = instance_of(ec2, m.instance_id)["SecurityGroups"][0]["GroupId"]
    deny = ec2.describe_security_groups(GroupIds=[group])["SecurityGroups"][0]
    assert deny["IpPermissions"] == [] and deny["IpPermissionsEgress"] != []
    fault.revert()


def test_fis_host_kill_says_what_the_endpoint_lacks_and_leaves_no_template(
    aws: Aws, ec2: Any, member: Callable[..., Member], moto_endpoint: str
) -> None:
    # moto implements FIS experiment templates but not StartExperiment.
    m = member()
    instance = find_instance(aws, BY_TAG, m.host)
    action = stop_instances(aws, instance, 90)
    assert action.parameters == {"startInstancesAfterDuration": "PT90S"}
    fault = FisExperiment(aws, instance, "host-kill", action, "arn:aws:iam::123456789012:role/fis")
    with pytest.raises(AwsError, match="StartExperiment: the endpoint does not implement"):
        fault.inject()
    assert fault.template_id is None  # created, then deleted again
    assert state(ec2, m) == "running"
    fault.revert()
    assert state(ec2, m) == "running"


def test_iso_durations() -> None:
    assert [iso_duration(s) for s in (0.2, 61, 60, 90, 600)] == [
        "PT1S", "PT61S", "PT1M", "PT90S", "PT10M"]  # fmt: skip


def test_waits_have_deadlines_with_clear_messages(aws: Aws, member: Callable[..., Member]) -> None:
    m = member()
    never = lambda: (False, "running")  # noqa: E731
    with pytest.raises(AwsError, match=r"waiter timeout: .* within 0.3s \(last seen: running\)"):
        aws.wait(f"{m.instance_id} stopped", never, timeout_s=0.3)
    assert aws.poll("x", never, 0.1) is False


def test_platform_section_accepts_empty_endpoint() -> None:
    platform = Ec2Platform(region="eu-west-1", endpoint_url="", profile="")
    assert platform.endpoint_url is None and platform.profile is None


def test_reboot_keeps_the_instance_running_and_owes_no_revert(
    aws: Aws, ec2: Any, member: Callable[..., Member]
) -> None:
    m = member()
    fault = kill(aws, m, action="reboot", restart=False)
    assert fault.revert_action() is None and "reboot" in fault.describe()
    fault.inject()
    assert fault.verify(1.0) and state(ec2, m) == "running"


def test_fis_volume_latency_parameters(aws: Aws, member: Callable[..., Member]) -> None:
    m = member()
    instance = find_instance(aws, BY_TAG, m.host)
    writes = volume_io_latency(aws, instance, m.volume_id, duration_s=120, latency_s=0.25,
                               probability=0.5, operations=("write", "fsync"))  # fmt: skip
    assert writes.parameters == {"duration": "PT2M", "writeIOPercentage": "50",
                                 "writeIOLatencyMilliseconds": "250"}  # fmt: skip
    assert writes.resource_arn.endswith(f":volume/{m.volume_id}")
    both = volume_io_latency(aws, instance, m.volume_id, duration_s=30, latency_s=0.01,
                             probability=1.0, operations=("any",))  # fmt: skip
    assert both.parameters["readIOLatencyMilliseconds"] == "10"
    assert both.parameters["writeIOPercentage"] == "100"


def test_preflight_refuses_a_throttle_of_a_recently_modified_volume(
    aws: Aws, ec2: Any, member: Callable[..., Member]
) -> None:
    m = member()
    platform = Ec2Platform(region="us-east-1", instances=BY_TAG, volume=AT_SDF)
    throttle_fault = make_fault(at=1, kind="iops-throttle", engine="api", duration=60,
                                iops=3000)  # fmt: skip
    instance = find_instance(aws, BY_TAG, m.host)
    assert preflight(aws, platform, (throttle_fault,), [instance]) == []
    ec2.modify_volume(VolumeId=m.volume_id, Iops=5000)
    (problem,) = preflight(aws, platform, (throttle_fault,), [instance])
    assert problem.startswith(f"faults[0] iops-throttle on {m.host}: {m.volume_id} was modified")
    assert "faults[0].ec2.accept_modification_limit: true" in problem
    accepted = throttle_fault.model_copy(update={"ec2": Ec2Fault(accept_modification_limit=True)})
    assert preflight(aws, platform, (accepted,), [instance]) == []


# One fault per way of the spec's ec2 column that makes EC2 calls of its own.
SPEC_FAULTS = [
    {"kind": "host-kill", "duration": 60},
    {"kind": "host-kill", "restart": {"after": 60, "volume": "wipe"}},
    {"kind": "host-kill", "restart": False, "one_way": True, "ec2": {"action": "terminate"}},
    {"kind": "host-kill", "restart": False, "ec2": {"action": "reboot"}},
    {"kind": "host-kill", "engine": "fis", "duration": 120},
    {"kind": "volume-detach", "duration": 60},
    {"kind": "iops-throttle", "engine": "api", "one_way": True, "iops": 3000, "duration": 60},
    {"kind": "network-partition", "duration": 60},
    {"kind": "network-partition", "isolate_from": "all", "approximate": True, "duration": 60},
]


@pytest.mark.parametrize("fields", SPEC_FAULTS, ids=lambda f: json.dumps(f))
def test_the_preflight_dry_runs_only_actions_the_spec_names(
    aws: Aws, member: Callable[..., Member], fields: dict[str, Any]
) -> None:
    """Each DryRun the preflight makes is an IAM action of the fault's way in the spec (the
    plan's list): a call the spec forgot would be refused on AWS though the plan said nothing."""
    from rsdrill.experiment.catalog import privileges_of
    from rsdrill.platforms.ec2.preflight import _calls

    m = member()
    fault = make_fault(at=1, **fields)
    instance = find_instance(aws, BY_TAG, m.host)
    calls = _calls(aws, fault, instance, (m.volume_id, DATA_DEVICE))
    actions = {"ec2:" + "".join(w.capitalize() for w in op.split("_")) for op, _ in calls}
    named = set(privileges_of("ec2", fault))
    assert actions <= named, f"DryRun of {actions - named}, not in the spec's {sorted(named)}"
    assert calls or fault.engine == "fis"  # FIS has no DryRun


def test_fis_template_for_a_paused_volume_as_the_fis_api_stores_it(
    aws: Aws, member: Callable[..., Member]
) -> None:
    m = member()
    instance = find_instance(aws, BY_TAG, m.host)
    fault = FisExperiment(aws, instance, "volume-detach",
                          pause_volume_io(aws, instance, m.volume_id, 45),
                          "arn:aws:iam::123456789012:role/fis")  # fmt: skip
    stored = aws.fis("create_experiment_template", **fault.template_request())
    template = stored["experimentTemplate"]
    try:
        assert template["actions"]["fault"]["actionId"] == "aws:ebs:pause-volume-io"
        assert template["actions"]["fault"]["parameters"] == {"duration": "PT45S"}
        target = template["targets"]["Volumes"]
        assert target["resourceType"] == "aws:ec2:ebs-volume"
        assert target["resourceArns"] == [
            f"arn:aws:ec2:us-east-1:{instance.owner_id}:volume/{m.volume_id}"]  # fmt: skip
        assert template["tags"]["rsdrill:fis"] == fault.token
    finally:
        aws.fis("delete_experiment_template", id=template["id"])


def test_fis_network_degrade_runs_awsfis_ssm_documents_as_the_fis_api_stores_them(
    aws: Aws, member: Callable[..., Member]
) -> None:
    m = member()
    instance = find_instance(aws, BY_TAG, m.host)
    latency = ssm_network_degrade(aws, instance, duration_s=90, latency_s=0.2, loss=None,
                                  interface="ens5")  # fmt: skip
    assert latency.parameters["documentArn"] == (
        "arn:aws:ssm:us-east-1::document/AWSFIS-Run-Network-Latency")  # fmt: skip
    assert json.loads(latency.parameters["documentParameters"]) == {
        "Interface": "ens5", "DurationSeconds": "90", "InstallDependencies": "True",
        "DelayMilliseconds": "200"}  # fmt: skip
    loss = ssm_network_degrade(aws, instance, duration_s=30, latency_s=None, loss=0.075,
                               interface="eth0")  # fmt: skip
    assert loss.parameters["documentArn"].endswith(":document/AWSFIS-Run-Network-Packet-Loss")
    assert json.loads(loss.parameters["documentParameters"])["LossPercent"] == "7.5"
    fault = FisExperiment(aws, instance, "network-degrade", latency,
                          "arn:aws:iam::123456789012:role/fis")  # fmt: skip
    stored = aws.fis("create_experiment_template", **fault.template_request())
    template = stored["experimentTemplate"]
    try:
        action = template["actions"]["fault"]
        assert action["actionId"] == "aws:ssm:send-command"
        assert action["parameters"] == latency.parameters
        assert action["parameters"]["duration"] == "PT90S"
        target = template["targets"]["Instances"]
        assert target["resourceType"] == "aws:ec2:instance"
        assert target["resourceArns"] == [instance.arn(aws)]
    finally:
        aws.fis("delete_experiment_template", id=template["id"])


FIS_ROLE = "arn:aws:iam::123456789012:role/fis"


def test_fis_stress_and_disk_fill_run_awsfis_ssm_documents_as_the_fis_api_stores_them(
    aws: Aws, member: Callable[..., Member]
) -> None:
    """cpu-starve, memory-pressure and disk-fill (engine fis) through the platform's injector:
    AWS's documents with their own parameter names, sized from the instance type (an
    m5.large: 2 vCPUs, 8 GiB), in a template as FIS stores it."""
    m = member()
    instance = find_instance(aws, BY_TAG, m.host)
    assert instance_size(aws, instance) == InstanceSize(vcpus=2, memory_mib=8192)
    platform = Ec2Platform(region="us-east-1", instances=BY_TAG, fis_role_arn=FIS_ROLE)
    cases = [
        # 2 vCPUs x (ceil(1/0.25) - 1) workers at full load: a busy mongod thread keeps 1/4.
        ({"kind": "cpu-starve", "cpu_share": 0.25}, "AWSFIS-Run-CPU-Stress",
         {"CPU": "6", "LoadPercent": "100"}),
        # 8192 MiB less 1024: 87.5 %, rounded down so the member keeps at least what it asked.
        ({"kind": "memory-pressure", "memory_limit_mb": 1024}, "AWSFIS-Run-Memory-Stress",
         {"Percent": "87", "Workers": "1"}),
        ({"kind": "disk-fill", "fill_percent": 95}, "AWSFIS-Run-Disk-Fill", {"Percent": "95"}),
    ]  # fmt: skip
    for fields, document, parameters in cases:
        fault = make_fault(at=1, engine="fis", duration=120, approximate=True, **fields)
        injector = instance_injector(aws, platform, fault, instance)
        assert isinstance(injector, FisExperiment)
        action = injector.action
        assert action.parameters["documentArn"] == f"arn:aws:ssm:us-east-1::document/{document}"
        assert json.loads(action.parameters["documentParameters"]) == {
            **parameters, "DurationSeconds": "120", "InstallDependencies": "True"}  # fmt: skip
        stored = aws.fis("create_experiment_template", **injector.template_request())
        template = stored["experimentTemplate"]
        try:
            assert template["actions"]["fault"]["actionId"] == "aws:ssm:send-command"
            assert template["actions"]["fault"]["parameters"] == {**action.parameters,
                                                                  "duration": "PT2M"}  # fmt: skip
            assert template["targets"]["Instances"]["resourceArns"] == [instance.arn(aws)]
            assert template["tags"]["rsdrill:fis"] == injector.token
        finally:
            aws.fis("delete_experiment_template", id=template["id"])
        sized = fields["kind"] != "disk-fill"
        assert ("ec2:DescribeInstanceTypes" in iam_actions(fault)) == sized
    # The credentials may describe the instance type (DryRun) before anything is injected.
    stress = make_fault(at=1, kind="cpu-starve", engine="fis", duration=60, approximate=True)
    assert preflight(aws, platform, (stress,), [instance]) == []
    # All the memory left to the member: nothing for the stress to take, said before it runs.
    greedy = make_fault(at=1, kind="memory-pressure", engine="fis", duration=60,
                        memory_limit_mb=8150, approximate=True)  # fmt: skip
    with pytest.raises(AwsError, match=r"memory_limit_mb 8150 leaves less than 1 % of the 8192 "
                       r"MiB of m5\.large to take"):  # fmt: skip
        instance_injector(aws, platform, greedy, instance)
