"""zone-outage way isolate on EC2, against moto's server: the network ACL of a zone member's
subnet lets through only the zone's subnets (allow entries, then a deny of 0.0.0.0/0, before
the ACL's own rules), deleted on revert (repeatable, from the journal alone); members sharing
an ACL share its entries; an ACL that also guards a subnet outside the zone, or a member
outside the domain, or that leaves no room before its own rules, refuses and changes nothing."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import Any

import pytest
from harness.moto_ec2 import Member, allow_all, instance_of, own_acl

from rsdrill.platforms.base import InjectionError
from rsdrill.platforms.ec2.acl import ZoneAclIsolation, describe_acl, subnet_acl
from rsdrill.platforms.ec2.injectors import REVERT_ACTIONS, Aws
from rsdrill.platforms.ec2.lookup import Instance, find_instance
from rsdrill.platforms.ec2.options import MemberInstances

BY_TAG = MemberInstances(by="tag")


def entries(ec2: Any, acl: str) -> list[dict[str, Any]]:
    """The ACL's entries but its own (rule 100) and the default (*) ones."""
    [found] = ec2.describe_network_acls(NetworkAclIds=[acl])["NetworkAcls"]
    return [e for e in found["Entries"] if e["RuleNumber"] < 100]


def placed(aws: Aws, *members: Member) -> list[Instance]:
    return [find_instance(aws, BY_TAG, m.host) for m in members]


def test_the_zone_s_subnets_stay_open_and_everything_else_is_denied(
    aws: Aws, ec2: Any, member: Callable[..., Member]
) -> None:
    inside, out1, out2 = [member(subnet=i) for i in (0, 1, 2)]
    zone, *outside = placed(aws, inside, out1, out2)
    subnet = instance_of(ec2, inside.instance_id)["SubnetId"]
    cidr = ec2.describe_subnets(SubnetIds=[subnet])["Subnets"][0]["CidrBlock"]
    with own_acl(ec2, subnet) as acl:
        fault = ZoneAclIsolation(aws, zone, (zone,), tuple(outside))
        assert not fault.verify(0.1)
        fault.inject()
        assert fault.verify(5.0)
        added = entries(ec2, acl)
        for egress in (False, True):
            way = sorted((e["RuleNumber"], e["RuleAction"], e["CidrBlock"]) for e in added
                         if e["Egress"] == egress)  # fmt: skip
            # The zone's subnets allowed first, then everything denied: matched in that order.
            assert [(a, c) for _, a, c in way] == [("allow", cidr), ("deny", "0.0.0.0/0")]
        # Every other member's address is denied by it, the zone member's is not.
        for m, denied in ((inside, False), (out1, True), (out2, True)):
            ip = ipaddress.ip_address(instance_of(ec2, m.instance_id)["PrivateIpAddress"])
            assert (ip not in ipaddress.ip_network(cidr)) is denied
        action = fault.revert_action()
        fault.revert()
        assert entries(ec2, acl) == []
        assert action is not None and "already gone" in REVERT_ACTIONS[action["action"]](action)


def test_zone_members_sharing_an_acl_share_its_entries(
    aws: Aws, ec2: Any, member: Callable[..., Member]
) -> None:
    a, b, out = member(subnet=3), member(subnet=3), member(subnet=4)
    first, second, other = placed(aws, a, b, out)
    owner, joiner = sorted((first, second), key=lambda i: i.member)
    with own_acl(ec2, instance_of(ec2, a.instance_id)["SubnetId"]) as acl:
        faults = [ZoneAclIsolation(aws, i, (first, second), (other,)) for i in (owner, joiner)]
        assert [bool(f.entries) for f in faults] == [True, False]
        assert faults[1].revert_action() is None and owner.member in faults[1].describe()
        assert not faults[1].verify(0.1)  # nothing denied yet
        for fault in faults:
            fault.inject()
        assert all(f.verify(5.0) for f in faults)
        assert len(entries(ec2, acl)) == 4  # once: allow + deny, in and out
        for fault in reversed(faults):
            fault.revert()
        assert entries(ec2, acl) == []


def test_an_acl_guarding_other_zones_refuses_and_changes_nothing(
    aws: Aws, ec2: Any, member: Callable[..., Member]
) -> None:
    """The default ACL guards every subnet of the VPC: cutting one zone there would cut all."""
    inside, out = member(subnet=0), member(subnet=1)
    zone, other = placed(aws, inside, out)
    acl = subnet_acl(aws, zone.subnet_id or "")
    before = acl["Entries"]
    with pytest.raises(InjectionError, match=r"refused, nothing changed: .* also guards subnet-"):
        ZoneAclIsolation(aws, zone, (zone,), (other,))
    assert describe_acl(aws, acl["NetworkAclId"])["Entries"] == before


def test_a_member_outside_the_domain_behind_the_acl_refuses(
    aws: Aws, ec2: Any, member: Callable[..., Member]
) -> None:
    """A tag's domain can split a subnet; an ACL cannot."""
    inside, beside = member(subnet=5), member(subnet=5)
    zone, other = placed(aws, inside, beside)
    with own_acl(ec2, zone.subnet_id or "") as acl:
        with pytest.raises(InjectionError, match=rf"the subnets of {other.member}"):
            ZoneAclIsolation(aws, zone, (zone,), (other,))
        assert entries(ec2, acl) == []


def test_an_acl_rule_first_in_line_leaves_no_room(
    aws: Aws, ec2: Any, member: Callable[..., Member]
) -> None:
    inside, out = member(subnet=2), member(subnet=3)
    zone, other = placed(aws, inside, out)
    with own_acl(ec2, zone.subnet_id or "") as acl:
        allow_all(ec2, acl, 2, egress=True)
        with pytest.raises(InjectionError, match=r"rule 2 \(out\) leaves no room"):
            ZoneAclIsolation(aws, zone, (zone,), (other,))
        ec2.delete_network_acl_entry(NetworkAclId=acl, RuleNumber=2, Egress=True)
        assert entries(ec2, acl) == []


def test_preflight_asks_ec2_about_the_zone_s_acl_calls(
    aws: Aws, ec2: Any, member: Callable[..., Member]
) -> None:
    from rsdrill.experiment.schema import make_fault
    from rsdrill.platforms.ec2.injectors import preflight
    from rsdrill.platforms.ec2.options import Ec2Platform

    [zone] = placed(aws, member(subnet=1))
    # The member's own zone, whichever moto put subnet 1 in, behind an ACL of its own: the
    # ACL entry calls are asked (DryRun) and the ACL is not shared, so nothing is found.
    fault = make_fault(at=1, kind="zone-outage", duration=5,
                       select={"zone": zone.availability_zone})  # fmt: skip
    platform = Ec2Platform(region="us-east-1", instances=BY_TAG)
    with own_acl(ec2, zone.subnet_id or ""):
        assert preflight(aws, platform, (fault,), [zone]) == []
