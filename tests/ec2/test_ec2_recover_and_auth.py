"""A run that dies with EC2 faults in force is finished by `rsdrill recover` from the journal
alone; credentials that may not make a call are refused before anything is injected, with a
clear line and never the secret; faults EC2 cannot inject are refused when the file is read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from harness.moto_ec2 import (
    REGION,
    SECRET,
    Member,
    client,
    data_volume_at,
    instance_of,
    set_auth,
    volume_of,
)

from rsdrill.experiment.loader import ExperimentError, load_experiment_text
from rsdrill.experiment.schema import make_fault
from rsdrill.platforms.ec2.injectors import Aws, Connection, preflight
from rsdrill.platforms.ec2.lookup import find_instance
from rsdrill.platforms.ec2.options import DataVolume, Ec2Platform, MemberInstances
from tests.harness.cli import rsdrill_run

ROOT = Path(__file__).resolve().parents[2]

CRASHING_RUN = textwrap.dedent("""
    import os, sys
    from rsdrill.engine.journal import Journal
    from rsdrill.platforms.ec2.options import MemberInstances
    from rsdrill.platforms.ec2.injectors import Aws, Connection
    from rsdrill.platforms.ec2.lookup import find_instance
    from rsdrill.platforms.ec2.network import SecurityGroupPartition
    from rsdrill.platforms.ec2.volume import IopsThrottle, VolumeDetach
    from rsdrill.platforms.ec2.instance import InstanceKill
    from rsdrill.platforms.ec2.acl import AclPartition

    endpoint, hosts = sys.argv[1], sys.argv[2:]
    aws = Aws(Connection("us-east-1", endpoint_url=endpoint, poll_interval=0.05))
    found = [find_instance(aws, MemberInstances(by="tag"), h) for h in hosts]
    faults = [
        InstanceKill(aws, found[0], action="stop", force=True, one_way=False,
                     restart=True, replace_volume=None),
        VolumeDetach(aws, found[1], found[1].volumes["/dev/sdf"], "/dev/sdf"),
        IopsThrottle(aws, found[2], found[2].volumes["/dev/sdf"], iops=3000,
                     throughput_mb_s=None, accept_modification_limit=False, field="x",
                     one_way=True),
        SecurityGroupPartition(aws, found[3], outbound_too=True),
        AclPartition(aws, found[4], (found[5],)),
    ]
    journal = Journal.open_run("crashed-ec2", "ec2-crash")
    for i, fault in enumerate(faults):
        journal.write("intent", key=f"fault:{i}", kind=fault.kind, target=fault.target,
                      revert=fault.revert_action())
        fault.inject()
        journal.write("applied", key=f"fault:{i}")
    os._exit(9)  # dies with every fault in force, before any revert
""")


def rsdrill(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    return rsdrill_run([*args], capture_output=True,
                       text=True, timeout=120, cwd=ROOT,
                       env={**os.environ, "RSDRILL_HOME": str(home)})  # fmt: skip


def test_recover_reverts_every_fault_of_a_crashed_run(
    tmp_path: Path, ec2: Any, member: Callable[..., Member], moto_endpoint: str
) -> None:
    members = [member() for _ in range(4)] + [member(subnet=1), member(subnet=2)]
    home = tmp_path / "home"
    crashed = subprocess.run(
        [sys.executable, "-c", CRASHING_RUN, moto_endpoint, *(m.host for m in members)],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
        env={**os.environ, "RSDRILL_HOME": str(home)},
    )  # fmt: skip
    assert crashed.returncode == 9, crashed.stderr
    stopped, detached, throttled, isolated, cut, _ = members
    cut_ip = f"{instance_of(ec2, cut.instance_id)['PrivateIpAddress']}/32"

    def cut_entries() -> list[dict[str, Any]]:
        return [e for acl in ec2.describe_network_acls()["NetworkAcls"] for e in acl["Entries"]
                if e.get("CidrBlock") == cut_ip]  # fmt: skip

    assert len(cut_entries()) == 2
    assert instance_of(ec2, stopped.instance_id)["State"]["Name"] == "stopped"
    assert data_volume_at(ec2, detached.instance_id) is None
    assert volume_of(ec2, throttled.volume_id)["Iops"] == 3000
    assert [g["GroupId"] for g in instance_of(ec2, isolated.instance_id)["SecurityGroups"]] != [
        isolated.group_id]  # fmt: skip

    proc = rsdrill("recover", home=home)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert instance_of(ec2, stopped.instance_id)["State"]["Name"] == "running"
    assert data_volume_at(ec2, detached.instance_id) == detached.volume_id
    assert volume_of(ec2, throttled.volume_id)["Iops"] == 6000
    assert [g["GroupId"] for g in instance_of(ec2, isolated.instance_id)["SecurityGroups"]] == [
        isolated.group_id]  # fmt: skip
    assert cut_entries() == []
    assert "nothing to recover" in rsdrill("recover", home=home).stdout
    # The journal carries the connection, never a credential.
    (journal,) = (home / "journal").glob("*.jsonl")
    text = journal.read_text()
    assert SECRET not in text and "AKIA" not in text and SECRET not in proc.stdout + proc.stderr
    intents = [json.loads(line) for line in text.splitlines() if '"intent"' in line]
    assert {i["revert"]["action"] for i in intents} == {
        "ec2.start-instances", "ec2.attach-volume", "ec2.modify-volume",
        "ec2.restore-security-groups", "ec2.delete-acl-entries"}  # fmt: skip
    (modify,) = [i["revert"] for i in intents if i["revert"]["action"] == "ec2.modify-volume"]
    assert "T" in modify["not_before"]  # the earliest time AWS allows the restore, journaled
    assert intents[0]["revert"]["connection"] == {
        "region": REGION, "profile": None, "endpoint_url": moto_endpoint,
        "poll_interval": 0.05, "wait_timeout": 300.0}  # fmt: skip


def _restricted_keys(endpoint: str) -> dict[str, str]:
    """Keys of an IAM user who may describe EC2 but change nothing."""
    iam = client(endpoint, "iam")
    name = f"viewer-{os.urandom(4).hex()}"
    iam.create_user(UserName=name)
    policy = {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": ["ec2:Describe*"], "Resource": "*"}]}  # fmt: skip
    iam.put_user_policy(UserName=name, PolicyName="viewer", PolicyDocument=json.dumps(policy))
    key = iam.create_access_key(UserName=name)["AccessKey"]
    return {
        "AWS_ACCESS_KEY_ID": key["AccessKeyId"],
        "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"],
    }


def test_preflight_refuses_what_the_credentials_may_not_do(
    ec2: Any, member: Callable[..., Member], moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = member()
    keys = _restricted_keys(moto_endpoint)
    platform = Ec2Platform(region=REGION, endpoint_url=moto_endpoint,
                           instances=MemberInstances(by="tag"),
                           volume=DataVolume(device="/dev/sdf"))  # fmt: skip
    faults = (make_fault(at=1, kind="host-kill", duration=5),
              make_fault(at=1, kind="volume-detach", duration=5))  # fmt: skip
    for name, value in keys.items():
        monkeypatch.setenv(name, value)
    set_auth(moto_endpoint, 0)
    try:
        aws = Aws(Connection(REGION, endpoint_url=moto_endpoint, poll_interval=0.05))
        instance = find_instance(aws, platform.instances, m.host)  # describing is allowed
        problems = preflight(aws, platform, faults, [instance])
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)  # a key AWS does not know
        wrong = Aws(Connection(REGION, endpoint_url=moto_endpoint))
        with pytest.raises(Exception) as refused:
            find_instance(wrong, platform.instances, m.host)
    finally:
        set_auth(moto_endpoint, float("inf"))
    calls = " | ".join(problems)
    for call in ("ec2:StopInstances", "ec2:StartInstances", "ec2:DetachVolume",
                 "ec2:AttachVolume"):  # fmt: skip
        assert call in calls, calls
    assert "may not make this call" in calls
    assert keys["AWS_SECRET_ACCESS_KEY"] not in calls
    message = str(refused.value)
    assert message.startswith(("AuthFailure", "InvalidClientTokenId", "SignatureDoesNotMatch"))
    assert SECRET not in message and "\n" not in message
    # Nothing was touched.
    assert instance_of(ec2, m.instance_id)["State"]["Name"] == "running"
    assert data_volume_at(ec2, m.instance_id) == m.volume_id


EC2_FILE = """\
name: ec2-check
target:
  platform: ec2
  uri: mongodb://db1:27017/?replicaSet=rs0
  ec2:
    region: eu-west-1
    volume: {{device: /dev/sdf}}
    fis_role_arn: arn:aws:iam::123456789012:role/fis
faults:
  - at: 5s
{fault}
"""


@pytest.mark.parametrize(("fault", "where", "says"), [
    ("    kind: host-kill\n    restart: false\n    ec2: {action: terminate}",
     "faults[0].kind", "set `one_way: true`"),
    ("    kind: host-kill\n    restart: false\n    ec2: {action: terminate, allow_terminate: true}",
     "faults[0].ec2.allow_terminate", "the old spelling: write `one_way: true`"),
    ("    kind: host-kill\n    duration: 30s\n    one_way: true\n    ec2: {action: terminate}",
     "faults[0].restart", "cannot be restarted"),
    ("    kind: iops-throttle\n    duration: 10s\n    iops: 100", "faults[0].iops",
     "(engine ssm) caps reads and writes separately: give read_iops, write_iops, read_mb_s "
     "and/or write_mb_s (no latency); or engine: api with one_way: true"),
    ("    kind: iops-throttle\n    engine: api\n    duration: 10s\n    iops: 100",
     "faults[0].kind", "AWS allows the restore only 6 h after"),
    ("    kind: host-freeze\n    duration: 10s", "faults[0].kind", "cannot pause an instance"),
    ("    kind: disk-fault\n    duration: 10s\n    latency: 50ms", "faults[0].kind",
     "needs engine: fis"),
    ("    kind: iops-throttle\n    engine: api\n    duration: 10s\n    read_iops: 100",
     "faults[0].read_iops", "reads and writes together"),
    ("    kind: network-partition\n    duration: 10s\n    isolate_from: clients",
     "faults[0].isolate_from", "use members or all"),
    ("    kind: disk-fault\n    engine: fis\n    duration: 10s\n    latency: 50ms",
     "faults[0].errno", "set errno: none"),
    ("    kind: volume-detach\n    duration: 10s\n    engine: chaos-mesh", "faults[0].engine",
     "not one of ec2's"),
    ("    kind: volume-detach\n    duration: 10s\n    ec2: {accept_modification_limit: true}",
     "faults[0].ec2.accept_modification_limit", "applies to iops-throttle"),
    ("    kind: host-kill\n    restart: {model: ha}", "faults[0].restart.model",
     "model ha is vSphere HA's restart"),
])  # fmt: skip
def test_what_ec2_cannot_do_is_refused_naming_the_field(fault: str, where: str, says: str) -> None:
    with pytest.raises(ExperimentError) as refused:
        load_experiment_text(EC2_FILE.format(fault=fault), "ec2.yaml")
    message = str(refused.value)
    assert message.startswith("ec2.yaml:") and where in message and says in message, message


def test_fis_needs_its_role_and_restarts_at_least_a_minute_later() -> None:
    text = EC2_FILE.format(fault="    kind: host-kill\n    engine: fis\n    duration: 30s")
    with pytest.raises(ExperimentError, match=r"faults\[0\].duration: .*at least a minute"):
        load_experiment_text(text, "ec2.yaml")
    assert load_experiment_text(text.replace("30s", "2m")).faults[0].engine == "fis"
    no_role = "\n".join(line for line in text.replace("30s", "2m").splitlines()
                        if "fis_role_arn" not in line)  # fmt: skip
    with pytest.raises(ExperimentError, match=r"target.ec2.fis_role_arn: .*IAM role"):
        load_experiment_text(no_role, "ec2.yaml")


@pytest.mark.parametrize("fault", [
    "    kind: host-kill\n    restart: {after: 60s, volume: wipe}",
    "    kind: iops-throttle\n    engine: api\n    duration: 10m\n    iops: 3000\n"
    "    one_way: true\n    ec2: {accept_modification_limit: true}",
    "    kind: iops-throttle\n    duration: 10m\n    write_iops: 50",
    "    kind: network-partition\n    duration: 10s\n    isolate_from: all\n"
    "    approximate: true",
    "    kind: network-partition\n    duration: 10s",
    "    kind: host-kill\n    restart: false\n    ec2: {action: reboot}",
])  # fmt: skip
def test_supported_faults_load(fault: str) -> None:
    kind = fault.split("kind: ")[1].split("\n")[0]
    assert load_experiment_text(EC2_FILE.format(fault=fault)).faults[0].kind == kind


def test_terminate_refused_by_run_exits_2_and_touches_nothing(
    tmp_path: Path, ec2: Any, member: Callable[..., Member], moto_endpoint: str
) -> None:
    m = member()
    experiment = tmp_path / "terminate.yaml"
    experiment.write_text(EC2_FILE.format(fault="    kind: host-kill\n    restart: false\n"
                                          "    ec2: {action: terminate}").replace(
        "region: eu-west-1", f"region: {REGION}\n    endpoint_url: {moto_endpoint}"))  # fmt: skip
    proc = rsdrill("run", str(experiment), "--out", str(tmp_path / "out"), "--no-live",
                   "--no-history", home=tmp_path / "home")  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "one_way: true" in proc.stderr + proc.stdout and "Traceback" not in proc.stderr
    assert instance_of(ec2, m.instance_id)["State"]["Name"] == "running"


def test_plan_lists_the_iam_actions_of_every_matrix_run() -> None:
    from rsdrill.experiment.loader import load_experiment
    from rsdrill.experiment.plan import render_plan

    exp = load_experiment(
        ROOT / "experiments" / "ec2-recovery-keep-vs-wipe.yaml",
        env={"RSDRILL_EC2_URI": "mongodb://db1:27017/?replicaSet=rs0"},
    )
    plan = render_plan(exp)
    assert "faults[0] host-kill (engine api): ec2:StopInstances, ec2:StartInstances" in plan
    needed = plan.split("IAM actions needed: ")[1].splitlines()[0]
    assert "ec2:CreateVolume" in needed and "ec2:AttachVolume" in needed  # the wipe run's
