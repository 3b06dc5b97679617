"""A replica set on a platform rsdrill does not start (Kubernetes, EC2, vSphere): reached through
the user's connection string; its members are whatever the set itself says they are."""

from __future__ import annotations

from pathlib import Path

from rsdrill.connection import (
    ConnectOptions,
    DirectConnection,
    ParsedUri,
    SettingsError,
    WireClientError,
    parse_uri,
)
from rsdrill.deployment import topology_of
from rsdrill.experiment.schema import Experiment
from rsdrill.platforms.base import TargetError
from rsdrill.redact import redact_uri

HELLO_TIMEOUT_S = 5.0


def target_uri(uri: str) -> ParsedUri:
    """The seeds (`mongodb+srv://` resolved as drivers do) and options of the target's
    connection string; TargetError naming what cannot be used."""
    try:
        return parse_uri(uri)
    except SettingsError as exc:
        raise TargetError(f"target.uri {redact_uri(uri)}: {exc}") from None


def discover_members(
    seeds: list[str], timeout_s: float = HELLO_TIMEOUT_S, *, options: ConnectOptions
) -> list[str]:
    """Every member (data-bearing, passive, arbiter) as the first seed that answers lists them;
    a standalone server is its own only member."""
    problems = []
    for seed in seeds:
        conn = DirectConnection(seed, timeout_s, options)
        try:
            hello = conn.hello()
        except WireClientError as exc:
            problems.append(f"{seed}: {exc}")
            continue
        finally:
            conn.close()
        if topology_of(hello) == "standalone":
            return [seed]
        members = [*hello.get("hosts", []), *hello.get("passives", []),
                   *hello.get("arbiters", [])]  # fmt: skip
        if not members:
            problems.append(f"{seed}: answers, but is not a replica-set member")
            continue
        return [str(m) for m in members]
    raise TargetError("no member of the replica set answers: " + "; ".join(problems))


class RemoteTarget:
    """Base of the platform targets: connection and member discovery; subclasses add the
    platform client, which their kinds' injector factories use."""

    keep = True

    def __init__(self, exp: Experiment, out_dir: Path) -> None:
        assert exp.target.uri is not None  # the schema requires it on remote platforms
        self.config = exp.target
        self.platform = exp.target.platform
        self.topology = exp.target.topology
        self.uri = exp.target.uri
        self.out_dir = out_dir
        self.members: list[str] = []
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
        self.members = discover_members(parsed.seeds, options=parsed.options)

    def prepare(self) -> None:
        """Nothing: the platform's faults need no change to the members beforehand."""

    def teardown(self) -> None:
        """Nothing: the set is the user's, and every fault was reverted already."""
        return None

    def recover_action(self) -> dict[str, object] | None:
        return None
