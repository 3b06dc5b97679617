"""A replica set or sharded cluster on a platform rsdrill does not start (Kubernetes, EC2,
vSphere): reached through the user's connection string; its members are whatever the set (or
the cluster's routers) say they are."""

from __future__ import annotations

from pathlib import Path

from rsdrill.connection import ConnectOptions, ParsedUri, SettingsError, parse_uri
from rsdrill.experiment.schema import Experiment
from rsdrill.layout import ShardedLayout
from rsdrill.platforms.base import TargetError
from rsdrill.platforms.discovery import discover_members, found_cluster
from rsdrill.redact import redact_uri


def target_uri(uri: str) -> ParsedUri:
    """The seeds (`mongodb+srv://` resolved as drivers do) and options of the target's
    connection string; TargetError naming what cannot be used."""
    try:
        return parse_uri(uri)
    except SettingsError as exc:
        raise TargetError(f"target.uri {redact_uri(uri)}: {exc}") from None


class RemoteTarget:
    """Base of the platform targets: connection and member discovery; subclasses add the
    platform client, which their kinds' injector factories use."""

    keep = True

    def __init__(self, exp: Experiment, out_dir: Path) -> None:
        assert exp.target.uri is not None  # the schema requires it on remote platforms
        self.config = exp.target
        self.experiment = exp
        self.platform = exp.target.platform
        self.topology = exp.target.topology
        self.uri = exp.target.uri
        self.out_dir = out_dir
        self.members: list[str] = []
        # A sharded target's sets and routers, once `setup()` has found them.
        self.layout: ShardedLayout | None = None
        self._parsed: ParsedUri | None = None

    def _target_uri(self) -> ParsedUri:
        # Read once: a `mongodb+srv://` name is resolved once per run.
        if self._parsed is None:
            self._parsed = target_uri(self.uri)
        return self._parsed

    @property
    def connect_options(self) -> ConnectOptions:
        """The URI's TLS, login and appName (TargetError when the URI cannot be used)."""
        return self._target_uri().options

    def setup(self) -> None:
        """Find the members; a set that cannot be reached is refused before anything else."""
        parsed = self._target_uri()
        if self.topology == "sharded":
            self.layout = found_cluster(self.experiment, parsed.seeds, parsed.options)
            self.members = self.layout.members()
        else:
            self.members = discover_members(parsed.seeds, options=parsed.options)

    @property
    def mapped_hosts(self) -> list[str]:
        """What the platform maps to its objects: the members, and a sharded cluster's routers
        (a router's pod, instance or VM is killed as a member's is)."""
        return [*self.members, *(self.layout.routers if self.layout else ())]

    def replica_sets(self) -> dict[str, list[str]]:
        """The members by replica set (a sharded cluster's sets by name; else one, "")."""
        if self.layout is None:
            return {"": list(self.members)}
        return {name: list(hosts) for name, hosts in self.layout.sets().items()}

    def prepare(self) -> None:
        """Nothing: the platform's faults need no change to the members beforehand."""

    def teardown(self) -> None:
        """Nothing: the set is the user's, and every fault was reverted already."""
        return None

    def recover_action(self) -> dict[str, object] | None:
        return None
