"""`platform: local`: member processes already running on this machine (a real mongod or any
wire-compatible server), each given with the command that starts it and its data directory."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rsdrill.connection import ConnectOptions
from rsdrill.experiment.schema import Experiment, Target
from rsdrill.platforms.base import RunTarget, TargetError
from rsdrill.platforms.machine.local_hosts import LocalHosts, answers_hello


class LocalTarget:
    platform = "local"
    keep = True  # the processes were there before the run and stay after it

    def __init__(self, config: Target, directory: Path) -> None:
        self.config = config
        self.topology = config.topology
        self.uri = config.uri or ""
        self.members = [m.host for m in config.members]
        # SettingsError when the URI's TLS files or login cannot be used: the run's error.
        self.connect_options = ConnectOptions.from_uri(self.uri)
        self.hosts = LocalHosts(config.members, directory / "local-logs", self.connect_options)

    def setup(self) -> None:
        silent = [h for h in self.members
                  if not answers_hello(h, timeout_s=2.0, options=self.connect_options)]  # fmt: skip
        if silent:
            raise TargetError(f"local members not answering hello: {', '.join(silent)}")

    def teardown(self) -> None:
        """Nothing to stop: the processes were there before the run and stay after it."""

    def faultfs_mountpoint(self, host: str) -> Path | None:
        """The member's faultfs mount (its `faultfs` field) while it is mounted."""
        from rsdrill.faultfs.mount import is_mounted

        member = self.hosts.members[host]
        point = Path(member.faultfs) if member.faultfs else None
        return point if point is not None and is_mounted(point) else None

    def recover_action(self) -> dict[str, object] | None:
        return None


def make_target(exp: Experiment, out_dir: Path) -> LocalTarget:
    """The members the experiment lists, restarted with their logs under `out_dir`."""
    return LocalTarget(exp.target, out_dir)


if TYPE_CHECKING:
    # The runner takes it as a RunTarget: mypy checks here that it is one.
    _RUN_TARGET: type[RunTarget] = LocalTarget
