"""`platform: local`: member processes already running on this machine (a real mongod or any
wire-compatible server), each given with the command that starts it and its data directory."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from rsdrill.connection import ConnectOptions, answers_hello
from rsdrill.experiment.schema import Experiment
from rsdrill.layout import ShardedLayout
from rsdrill.platforms.base import RunTarget, TargetError
from rsdrill.platforms.discovery import found_cluster
from rsdrill.platforms.machine import faketime
from rsdrill.platforms.machine.disk_fill import own_disk_problem
from rsdrill.platforms.machine.local_hosts import LocalHosts
from rsdrill.platforms.remote import target_uri
from rsdrill.states import HEALTHY, PRIMARY_LIKE, member_state


class LocalTarget:
    platform = "local"
    keep = True  # the processes were there before the run and stay after it

    def __init__(self, exp: Experiment, directory: Path) -> None:
        config = exp.target
        kinds = frozenset(f.kind for f in exp.faults)
        self.config = config
        self.topology = config.topology
        self.uri = config.uri or ""
        self.members = [m.host for m in config.members]
        self.experiment = exp
        # A sharded target's sets and routers, once `setup()` has found them from `uri`.
        self.layout: ShardedLayout | None = None
        # SettingsError when the URI's TLS files or login cannot be used: the run's error.
        self.connect_options = ConnectOptions.from_uri(self.uri)
        self.fills_disks = "disk-fill" in kinds
        # clock-skew: each member (re)started under libfaketime with an offset file of the
        # run's (or the one it already runs with), so any of them can be the one selected.
        directory = directory.resolve()  # journaled (logs, clocks): `recover` may run elsewhere
        clocks = directory / "clocks"
        self.clock_files = (
            {h: clocks / h.replace(":", "_") for h in self.members} if "clock-skew" in kinds else {}
        )
        self.hosts = LocalHosts(
            config.members, directory / "local-logs", self.connect_options, self.clock_files
        )

    def setup(self) -> None:
        """Every member answers; what the run's faults need of this machine is here (read
        only: `rsdrill check` calls it)."""
        silent = [h for h in self.members
                  if not answers_hello(h, timeout_s=2.0, options=self.connect_options)]  # fmt: skip
        if silent:
            raise TargetError(f"local members not answering hello: {', '.join(silent)}")
        if self.topology == "sharded":
            self._find_cluster()
        if self.clock_files and faketime.library() is None:
            raise TargetError("clock-skew on local members needs libfaketime, which is not "
                              f"installed ({faketime.INSTALL_HINT})")  # fmt: skip
        if self.fills_disks:
            for member in self.config.members:
                problem = own_disk_problem(Path(member.dbpath or "."))
                if problem:
                    raise TargetError(f"disk-fill: {member.host}'s dbpath {problem}")

    def _find_cluster(self) -> None:
        """The cluster behind `uri`'s routers; each of its members and routers must be listed
        (its start command is how a killed one comes back)."""
        listed = [m.host for m in self.config.members]
        layout = found_cluster(self.experiment, target_uri(self.uri).seeds, self.connect_options)
        unlisted = [h for h in [*layout.members(), *layout.routers] if h not in listed]
        if unlisted:
            raise TargetError(f"the cluster's {', '.join(unlisted)}: not in target.members "
                              "(each member and router needs its start command)")  # fmt: skip
        self.layout = layout
        self.members = layout.members()

    def prepare(self) -> None:
        """clock-skew: each member not yet under libfaketime restarted under it at offset 0,
        one at a time (the primary last), each back to health before the next."""
        if not self.clock_files:
            return
        order = sorted(self.members, key=lambda h: self._state(h) in PRIMARY_LIKE)
        for host in order:
            pid = self.hosts.pid(host)
            current = faketime.offset_file_of(pid) if pid is not None else None
            if current is not None:  # already preloaded (a run before this one did it)
                self.hosts.clock_files[host] = current
                continue
            faketime.set_offset(self.clock_files[host], 0.0)
            self.hosts.terminate(host)
            self.hosts.start(host, wipe=False)
            self._await_health(host)

    def data_directory(self, host: str) -> Path | None:
        member = next(m for m in self.config.members if m.host == host)
        return Path(member.dbpath) if member.dbpath else None

    def _state(self, host: str) -> str:
        return member_state(host, 2.0, options=self.connect_options)

    def _await_health(self, host: str, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while (state := self._state(host)) not in HEALTHY:
            if time.monotonic() > deadline:
                raise TargetError(f"{host} restarted under libfaketime but is {state} after "
                                  f"{timeout_s:.0f}s")  # fmt: skip
            time.sleep(0.1)

    def teardown(self) -> None:
        """Nothing to stop: the processes were there before the run and stay after it."""

    def faultfs_mountpoint(self, host: str) -> Path | None:
        """The member's faultfs mount (its `faultfs` field) while it is mounted."""
        from rsdrill.faultfs.mount import is_mounted

        member = self.hosts.members[host]
        # Absolute, as the daemon's socket is named: journaled, and `recover` may run elsewhere.
        point = Path(member.faultfs).absolute() if member.faultfs else None
        return point if point is not None and is_mounted(point) else None

    def small_disk(self, host: str) -> Path | None:
        """disk-fill: the member's dbpath, a filesystem of its own (`setup` checked it)."""
        dbpath = self.hosts.members[host].dbpath
        return Path(dbpath) if self.fills_disks and dbpath else None

    def recover_action(self) -> dict[str, object] | None:
        """clock-skew: `prepare` restarts members; a run that dies meanwhile leaves one down,
        so `rsdrill recover` starts any that does not answer (under libfaketime)."""
        if not self.clock_files:
            return None
        return {
            "action": "local-start-each",
            "starts": [self.hosts.restart_action(h, wipe=False) for h in self.members],
        }


def plan_details(exp: Experiment) -> list[str]:
    """What a run changes on the members before its first fault, and the disks it fills."""
    kinds = {f.kind for f in exp.faults}
    lines = []
    if "clock-skew" in kinds:
        lines.append(
            "clock-skew: before the first fault, each member not yet under libfaketime is "
            "stopped (SIGTERM) and started again by its command under it, one at a time, the "
            "primary last; it stays under it, at real time, after the run"
        )
    if "disk-fill" in kinds:
        paths = ", ".join(m.dbpath or "(not given)" for m in exp.target.members)
        lines.append(f"disk-fill: fills the filesystem mounted at the member's dbpath ({paths}); "
                     "each must be a filesystem of its own")  # fmt: skip
    return lines


def make_target(exp: Experiment, out_dir: Path) -> LocalTarget:
    """The members the experiment lists, restarted with their logs under `out_dir`."""
    return LocalTarget(exp, out_dir)


if TYPE_CHECKING:
    # The runner takes it as a RunTarget: mypy checks here that it is one.
    _RUN_TARGET: type[RunTarget] = LocalTarget
