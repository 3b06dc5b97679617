"""network-partition on EC2 through network ACL entries, against moto's server (boto3 checks
every request against EC2's service model before it is sent): the deny entries rsdrill adds
for the member's address, their revert (repeatable, and from the journal alone), the refusal
when a peer shares the member's subnet, and the security-group swap left as a labelled
approximation."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from harness.moto_ec2 import Member, instance_of

from rsdrill.experiment.loader import ExperimentError, load_experiment_text
from rsdrill.platforms.base import InjectionError
from rsdrill.platforms.ec2.acl import AclPartition
from rsdrill.platforms.ec2.injectors import REVERT_ACTIONS, Aws
from rsdrill.platforms.ec2.lookup import find_instance
from rsdrill.platforms.ec2.options import MemberInstances

BY_TAG = MemberInstances(by="tag")


def deny_entries(ec2: Any, ip: str) -> list[dict[str, Any]]:
    """Every deny entry of every ACL that names `ip`."""
    acls = ec2.describe_network_acls()["NetworkAcls"]
    return [e for acl in acls for e in acl["Entries"]
            if e.get("CidrBlock") == f"{ip}/32" and e["RuleAction"] == "deny"]  # fmt: skip


def test_acl_entries_deny_the_member_both_ways_and_are_deleted_on_revert(
    aws: Aws, ec2: Any, member: Callable[..., Member]
) -> None:
    cut, *others = [member(subnet=i) for i in range(3)]
    instance = find_instance(aws, BY_TAG, cut.host)
    peers = tuple(find_instance(aws, BY_TAG, m.host) for m in others)
    ip = instance_of(ec2, cut.instance_id)["PrivateIpAddress"]
    fault = AclPartition(aws, instance, peers)
    assert "established connections are cut too" in fault.describe()
    fault.inject()
    assert fault.verify(5.0)
    entries = deny_entries(ec2, ip)
    assert sorted(e["Egress"] for e in entries) == [False, True]
    assert all(e["Protocol"] == "-1" for e in entries)
    # Matched before the ACL's own allow-all rule (100).
    assert all(e["RuleNumber"] < 100 for e in entries)
    # The member keeps its security groups: nothing about it changed but the ACLs.
    assert [g["GroupId"] for g in instance_of(ec2, cut.instance_id)["SecurityGroups"]] == [
        cut.group_id]  # fmt: skip

    fault.revert()
    assert deny_entries(ec2, ip) == []
    assert not fault.verify(0.1)
    assert "already gone" in REVERT_ACTIONS["ec2.delete-acl-entries"](fault.revert_action())


def test_two_partitions_take_distinct_rule_numbers(
    aws: Aws, ec2: Any, member: Callable[..., Member]
) -> None:
    a, b, c = [member(subnet=i) for i in range(3)]
    found = {m.host: find_instance(aws, BY_TAG, m.host) for m in (a, b, c)}
    first = AclPartition(aws, found[a.host], (found[c.host],))
    first.inject()
    try:
        second = AclPartition(aws, found[b.host], (found[c.host],))
        taken = {(e.acl_id, e.rule_number, e.egress) for e in first.entries}
        assert not taken & {(e.acl_id, e.rule_number, e.egress) for e in second.entries}
        second.inject()
        second.revert()
        assert first.verify(1.0)  # the other partition's entries stay
    finally:
        first.revert()


def test_a_peer_in_the_member_s_subnet_refuses_the_partition_and_changes_nothing(
    aws: Aws, ec2: Any, member: Callable[..., Member]
) -> None:
    cut, same, other = member(subnet=4), member(subnet=4), member(subnet=5)
    instance = find_instance(aws, BY_TAG, cut.host)
    peers = (find_instance(aws, BY_TAG, same.host), find_instance(aws, BY_TAG, other.host))
    with pytest.raises(InjectionError, match=r"does not filter traffic within its subnet"):
        AclPartition(aws, instance, peers)
    assert deny_entries(ec2, instance_of(ec2, cut.instance_id)["PrivateIpAddress"]) == []


EC2_FILE = """\
name: ec2-partition
target:
  platform: ec2
  uri: mongodb://db1:27017/?replicaSet=rs0
  ec2: {{region: eu-west-1}}
faults:
  - {{at: 5s, kind: network-partition, duration: 10s, {options}}}
"""


def test_the_acl_way_is_exact_and_the_security_group_swap_needs_approximate() -> None:
    members = load_experiment_text(EC2_FILE.format(options="isolate_from: members"))
    assert members.faults[0].isolate_from == "members"
    with pytest.raises(ExperimentError) as refused:
        load_experiment_text(EC2_FILE.format(options="isolate_from: all"), "p.yaml")
    message = str(refused.value)
    assert message.startswith("p.yaml:7:")
    assert "security groups swapped for a deny-all group" in message
    assert "set `approximate: true`" in message
    swap = load_experiment_text(EC2_FILE.format(options="isolate_from: all, approximate: true"))
    assert swap.faults[0].approximate
    with pytest.raises(ExperimentError, match="direction: both"):
        load_experiment_text(EC2_FILE.format(options="isolate_from: members, direction: inbound"))


def test_preflight_asks_ec2_about_the_acl_calls(aws: Aws, member: Callable[..., Member]) -> None:
    from rsdrill.experiment.schema import make_fault
    from rsdrill.platforms.ec2.injectors import preflight
    from rsdrill.platforms.ec2.options import Ec2Platform

    m = member(subnet=3)
    fault = make_fault(at=1, kind="network-partition", duration=5, isolate_from="members")
    platform = Ec2Platform(region="us-east-1", instances=BY_TAG)
    instance = find_instance(aws, BY_TAG, m.host)
    # The DryRun calls change nothing: no entry is left in the subnet's ACL.
    assert preflight(aws, platform, (fault,), [instance]) == []
    assert deny_entries(aws.client("ec2"), "192.0.2.1") == []
