"""network-partition on EC2 that cuts established connections: network ACL entries that deny
the member's address, both ways, in the ACLs of the other members' subnets; deleted on revert.

Network ACLs are stateless: unlike a security group, which lets connections it already tracks
go on, a deny entry drops every packet from its first match, so a replica set's long-lived
member connections are cut too. An ACL filters only traffic that crosses its subnet's
boundary: members sharing the partitioned member's subnet cannot be cut this way, and the
injection is refused when one does (nothing changes). Entries take the lowest free rule
numbers, so they are matched before the ACL's own allow rules.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from rsdrill.platforms.base import InjectionError
from rsdrill.platforms.ec2.client import Aws, AwsError
from rsdrill.platforms.ec2.lookup import Instance

# AWS's rule numbers run from 1 to 32766; the default ACL's own rule is 100.
_MAX_RULE = 32766


@dataclass(frozen=True)
class AclEntry:
    """One entry rsdrill adds: which ACL, its rule number, inbound or outbound, deny or allow."""

    acl_id: str
    rule_number: int
    egress: bool
    cidr: str
    action: str = "deny"


class AclEntries:
    """A fault made of network ACL entries: added at once, deleted on revert (journaled)."""

    aws: Aws
    entries: tuple[AclEntry, ...]
    what: str  # for the verify's message

    def revert_action(self) -> dict[str, Any] | None:
        if not self.entries:
            return None
        return {"action": "ec2.delete-acl-entries", **self.aws.conn.to_action(),
                "entries": [asdict(e) for e in self.entries]}  # fmt: skip

    def inject(self) -> None:
        for entry in self.entries:
            self.aws.ec2("create_network_acl_entry", NetworkAclId=entry.acl_id,
                         RuleNumber=entry.rule_number, Protocol="-1", RuleAction=entry.action,
                         Egress=entry.egress, CidrBlock=entry.cidr)  # fmt: skip

    def verify(self, timeout_s: float) -> bool:
        def check() -> tuple[bool, str]:
            present = [e for e in self.entries if _present(self.aws, e)]
            return len(present) == len(self.entries), f"{len(present)} of {len(self.entries)}"

        return self.aws.poll(self.what, check, timeout_s)

    def revert(self) -> None:
        action = self.revert_action()
        if action is not None:
            delete_acl_entries(self.aws, action)


class AclPartition(AclEntries):
    """Deny the member's address in the ACLs of the subnets its peers are in."""

    kind = "network-partition"

    def __init__(self, aws: Aws, instance: Instance, peers: tuple[Instance, ...]) -> None:
        self.aws = aws
        self.instance = instance
        self.target = instance.member
        if instance.private_ip is None or instance.subnet_id is None:
            raise InjectionError(f"network-partition: {instance.id} ({instance.member}) has no "
                                 "private address in a VPC subnet")  # fmt: skip
        if not peers:
            raise InjectionError(f"network-partition: no other member of {instance.member}'s "
                                 "set was found among the instances")  # fmt: skip
        same = [p.member for p in peers if p.subnet_id == instance.subnet_id]
        if same:
            raise InjectionError(f"network-partition refused, nothing changed: {', '.join(same)} "
                                 f"share{'s' if len(same) == 1 else ''} subnet "
                                 f"{instance.subnet_id} with {instance.member}, and a network ACL "
                                 "does not filter traffic within its subnet (put members in "
                                 "separate subnets, or use isolate_from: all with approximate: "
                                 "true for the security-group swap)")  # fmt: skip
        self.peers = peers
        self.cidr = f"{instance.private_ip}/32"
        self.entries = self._plan()
        self.what = f"ACL entries denying {self.cidr}"

    def _plan(self) -> tuple[AclEntry, ...]:
        subnets = sorted({p.subnet_id for p in self.peers if p.subnet_id is not None})
        acls = sorted({subnet_acl(self.aws, subnet)["NetworkAclId"] for subnet in subnets})
        entries: list[AclEntry] = []
        for acl_id in acls:
            used = {(e["RuleNumber"], e["Egress"]) for e in describe_acl(self.aws, acl_id)
                    .get("Entries", [])}  # fmt: skip
            for egress in (False, True):
                number = next(n for n in range(1, _MAX_RULE + 1) if (n, egress) not in used)
                entries.append(AclEntry(acl_id, number, egress, self.cidr))
        return tuple(entries)

    def describe(self) -> str:
        acls = ", ".join(sorted({e.acl_id for e in self.entries}))
        peers = ", ".join(p.member for p in self.peers)
        return (f"deny {self.cidr} ({self.target}) in and out in network ACL {acls} of the "
                f"subnets of {peers}: established connections are cut too; later delete those "
                "entries")  # fmt: skip


class ZoneAclIsolation(AclEntries):
    """zone-outage way isolate: the network ACL of the member's subnet lets in and out only the
    traffic of the zone's subnets (allow entries for their CIDRs, then a deny of 0.0.0.0/0,
    matched before the ACL's own rules). Refused, nothing changed, when that ACL also guards a
    subnet outside the zone or a member outside the domain: denying there would cut them too.
    Members of the zone whose subnets share one ACL share its entries: the first of them (by
    name) adds them, the others find them in place."""

    kind = "zone-outage"

    def __init__(self, aws: Aws, instance: Instance, zone: tuple[Instance, ...],
                 outside: tuple[Instance, ...]) -> None:  # fmt: skip
        self.aws = aws
        self.target = instance.member
        if instance.subnet_id is None or instance.vpc_id is None:
            raise InjectionError(f"zone-outage: {instance.id} ({instance.member}) is not in a "
                                 "VPC subnet")  # fmt: skip
        acl = subnet_acl(aws, instance.subnet_id)
        self.acl_id = str(acl["NetworkAclId"])
        azs = sorted({i.availability_zone for i in zone})
        subnets = vpc_subnets(aws, instance.vpc_id)
        guarded = {a["SubnetId"] for a in acl.get("Associations", [])}
        foreign = [f"the subnets of {o.member}" for o in outside if o.subnet_id in guarded]
        problem = shared_acl(instance, acl, azs, subnets, foreign)
        if problem:
            raise InjectionError(f"zone-outage refused, nothing changed: {problem}")
        self.cidrs = sorted(s["CidrBlock"] for s in subnets if s["AvailabilityZone"] in azs)
        self.owner = min(i.member for i in zone if i.subnet_id in guarded)
        self.entries = self._plan(acl) if self.owner == instance.member else ()
        self.what = f"network ACL {self.acl_id} isolating {', '.join(azs)}"

    def _plan(self, acl: dict[str, Any]) -> tuple[AclEntry, ...]:
        entries: list[AclEntry] = []
        for egress in (False, True):
            used = sorted(e["RuleNumber"] for e in acl.get("Entries", [])
                          if e["Egress"] == egress and e["RuleNumber"] <= _MAX_RULE)  # fmt: skip
            free = [n for n in range(1, _MAX_RULE + 1) if n not in used][: len(self.cidrs) + 1]
            if used and free[-1] > used[0]:
                raise InjectionError(f"zone-outage refused, nothing changed: network ACL "
                                     f"{self.acl_id}'s rule {used[0]} "
                                     f"({'out' if egress else 'in'}) leaves no room before it "
                                     f"for the zone's {len(free)} entries")  # fmt: skip
            entries += [AclEntry(self.acl_id, n, egress, c, "allow")
                        for n, c in zip(free, self.cidrs, strict=False)]  # fmt: skip
            entries.append(AclEntry(self.acl_id, free[-1], egress, "0.0.0.0/0"))
        return tuple(entries)

    def describe(self) -> str:
        if not self.entries:
            return (f"network ACL {self.acl_id}, shared with {self.owner}, cuts the zone off: "
                    "its entries are that member's")  # fmt: skip
        return (f"network ACL {self.acl_id}: allow {', '.join(self.cidrs)} (the zone's subnets) "
                "in and out, deny 0.0.0.0/0, before its own rules: every IPv4 link out of the "
                "zone is cut, established ones too; later delete those entries")  # fmt: skip

    def verify(self, timeout_s: float) -> bool:
        if self.entries:
            return super().verify(timeout_s)

        def check() -> tuple[bool, str]:  # the owner's deny, both ways
            found = {e["Egress"] for e in describe_acl(self.aws, self.acl_id).get("Entries", [])
                     if e.get("CidrBlock") == "0.0.0.0/0" and e["RuleAction"] == "deny"
                     and e["RuleNumber"] <= _MAX_RULE}  # fmt: skip
            return found == {False, True}, f"denied ways: {sorted(found)}"

        return self.aws.poll(self.what, check, timeout_s)


def vpc_subnets(aws: Aws, vpc_id: str) -> list[dict[str, Any]]:
    return list(aws.ec2("describe_subnets", Filters=[
        {"Name": "vpc-id", "Values": [vpc_id]}])["Subnets"])  # fmt: skip


def shared_acl(instance: Instance, acl: dict[str, Any], azs: list[str],
               subnets: list[dict[str, Any]], also: Sequence[str] = ()) -> str | None:  # fmt: skip
    """Why closing the ACL of the instance's subnet to all but `azs` would cut more than the
    zone: the other zones' subnets it also guards (and `also`, the members outside the domain
    behind it); None when nothing."""
    guarded = {a["SubnetId"] for a in acl.get("Associations", [])}
    foreign = [f"{s['SubnetId']} ({s['AvailabilityZone']})" for s in subnets
               if s["SubnetId"] in guarded and s["AvailabilityZone"] not in azs]  # fmt: skip
    whom = sorted(foreign) + sorted(also)
    if not whom:
        return None
    return (f"network ACL {acl['NetworkAclId']} of {instance.member}'s subnet also guards "
            f"{', '.join(whom)}, outside {', '.join(azs)}, which cutting the zone off would cut "
            "too (give the zone's subnets a network ACL of their own)")  # fmt: skip


def subnet_acl(aws: Aws, subnet_id: str) -> dict[str, Any]:
    """The network ACL associated with the subnet (every subnet has exactly one)."""
    found = aws.ec2("describe_network_acls", Filters=[
        {"Name": "association.subnet-id", "Values": [subnet_id]}])["NetworkAcls"]  # fmt: skip
    if not found:
        raise AwsError(f"InvalidSubnetID.NotFound: no network ACL for subnet {subnet_id}",
                       "InvalidSubnetID.NotFound")  # fmt: skip
    return dict(found[0])


def describe_acl(aws: Aws, acl_id: str) -> dict[str, Any]:
    return dict(aws.ec2("describe_network_acls", NetworkAclIds=[acl_id])["NetworkAcls"][0])


def _present(aws: Aws, entry: AclEntry) -> bool:
    return any(
        e["RuleNumber"] == entry.rule_number and e["Egress"] == entry.egress
        and e.get("CidrBlock") == entry.cidr and e["RuleAction"] == entry.action
        for e in describe_acl(aws, entry.acl_id).get("Entries", [])
    )  # fmt: skip


def delete_acl_entries(aws: Aws, action: dict[str, Any]) -> str:
    """Delete the run's deny entries. Repeatable: an entry already gone (or since replaced by
    someone else's rule of the same number) is left alone."""
    done = []
    for raw in action["entries"]:
        entry = AclEntry(**raw)
        where = f"{entry.acl_id} rule {entry.rule_number} {'out' if entry.egress else 'in'}"
        if not _present(aws, entry):
            done.append(f"{where} already gone")
            continue
        aws.ec2("delete_network_acl_entry", NetworkAclId=entry.acl_id,
                RuleNumber=entry.rule_number, Egress=entry.egress)  # fmt: skip
        done.append(f"deleted {where} ({entry.cidr})")
    return "; ".join(done) or "no ACL entries to delete"
