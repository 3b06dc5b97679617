"""`platform: ec2`: a replica set on EC2 instances. Members come from the set itself (its
hello); each is mapped to its instance (private IP, private DNS name, a tag, or an explicit
map) when the run starts, and the credentials are checked (DryRun) before anything is injected.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rsdrill.domains import PlatformPlace
from rsdrill.experiment.schema import Experiment
from rsdrill.platforms.base import PlacesMembers, RunTarget, TargetError
from rsdrill.platforms.ec2.client import Aws, AwsError, connection
from rsdrill.platforms.ec2.lookup import Instance, find_instance
from rsdrill.platforms.ec2.options import Ec2Platform
from rsdrill.platforms.ec2.preflight import problems
from rsdrill.platforms.remote import RemoteTarget


class Ec2Target(RemoteTarget):
    def __init__(self, exp: Experiment, out_dir: Path) -> None:
        super().__init__(exp, out_dir)
        section = exp.target.section("ec2", Ec2Platform)
        assert section is not None  # the schema requires the section
        self.ec2 = section
        self.faults = exp.faults
        self.aws = Aws(connection(self.ec2))
        self.instances: dict[str, Instance] = {}

    def setup(self) -> None:
        """Find the members and their instances, then ask EC2 whether every call the faults
        will make is allowed; any problem refuses the run before anything is injected."""
        super().setup()
        mapped = self.mapped_hosts
        if self.ec2.instances.by == "map":
            # Members left out of the map (an arbiter elsewhere, say) cannot be faulted.
            mapped = [m for m in mapped if m in self.ec2.instances.map]
        try:
            self.instances = {m: find_instance(self.aws, self.ec2.instances, m) for m in mapped}
            found = problems(self.aws, self.ec2, self.faults, list(self.instances.values()),
                             routers=self.layout.routers if self.layout else ())  # fmt: skip
        except AwsError as exc:
            raise TargetError(f"ec2: {exc}") from None
        if found:
            raise TargetError("ec2 preflight refused, nothing was injected: " + "; ".join(found))

    def platform_placements(self) -> dict[str, PlatformPlace]:
        """Each member's instance's Availability Zone, and the region it was found in."""
        return {m: PlatformPlace(i.availability_zone or None, self.aws.conn.region)
                for m, i in self.instances.items()}  # fmt: skip

    def instance(self, host: str) -> Instance:
        """Member `host`'s instance as it is now (looked up again: its state and volumes may
        have changed since setup)."""
        return find_instance(self.aws, self.ec2.instances, host)


def make_target(exp: Experiment, out_dir: Path) -> Ec2Target:
    return Ec2Target(exp, out_dir)


if TYPE_CHECKING:
    # The runner takes it as a RunTarget that places its members: mypy checks here that it is.
    _RUN_TARGET: type[RunTarget] = Ec2Target
    _PLACES: type[PlacesMembers] = Ec2Target
