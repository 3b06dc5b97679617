"""Injectors as a run builds them: by the fault kind's factory in its platform's `injectors`
table, given the run's target, or only what those factories read of it."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from rsdrill import registry
from rsdrill.experiment.schema import Fault
from rsdrill.platforms.base import Injector, injector_factory
from rsdrill.platforms.ec2.client import Aws
from rsdrill.platforms.ec2.lookup import Instance
from rsdrill.platforms.ec2.options import Ec2Platform
from rsdrill.platforms.vsphere.client import Vsphere
from rsdrill.platforms.vsphere.options import VspherePlatform


def injector(platform: str, target: Any, fault: Fault, host: str) -> Injector:
    """The injector of `fault` on member `host` of `target`, as the runner builds it."""
    return injector_factory(registry.platform(platform), fault.kind)(target, fault, host)


def instance_injector(aws: Aws, ec2: Ec2Platform, fault: Fault, instance: Instance) -> Injector:
    """An EC2 fault on `instance`: its factories read the target's AWS session, section, the
    member's instance (found now) and the other members' ones."""
    target = SimpleNamespace(aws=aws, ec2=ec2, instances={}, instance=lambda host: instance,
                             members=[], layout=None)  # fmt: skip
    return injector("ec2", target, fault, instance.member)


def vm_injector(client: Vsphere, vsphere: VspherePlatform, fault: Fault, member: str) -> Injector:
    """A vSphere fault on `member`'s VM: its factories read the target's session and section."""
    return injector("vsphere", SimpleNamespace(client=client, vsphere=vsphere), fault, member)


def pod_injector(target: Any, fault: Fault, host: str) -> Injector:
    """A Kubernetes fault on `host`'s pod, given the run's target (a `KubernetesTarget`)."""
    return injector("kubernetes", target, fault, host)
