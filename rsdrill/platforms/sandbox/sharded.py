"""`platform: sandbox` with `topology: sharded`: config servers, shards and routers rsdrill
starts for the run (rsdrill/sandbox/sharded.py) and stops afterwards.

The run reaches the cluster through its routers (`uri`); its members are every replica set's
members (the config servers' and each shard's), and `layout` says which set each is in and
which hosts are routers, for selection, guards, probes and the analysis.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import TYPE_CHECKING

from rsdrill.connection import ConnectOptions
from rsdrill.experiment.schema import Target
from rsdrill.layout import CONFIG, ShardedLayout
from rsdrill.platforms.base import TargetError
from rsdrill.platforms.sandbox.hosts import SandboxHosts, free_port_base, settings_of
from rsdrill.sandbox.cluster import Sandbox, signal_process
from rsdrill.sandbox.config import CONFIG_SET, member_dir
from rsdrill.sandbox.errors import SandboxError
from rsdrill.sandbox.sharded import (
    ShardedSandbox,
    cluster_size,
    plan_cluster,
    routers_uri,
    up_sharded,
)

if TYPE_CHECKING:
    from rsdrill.platforms.base import ProcessHosts, RunTarget


class ShardedHosts:
    """The cluster's processes by host:port: a member through its set's sandbox, a router as
    the cluster's own process."""

    def __init__(self, cluster: ShardedSandbox) -> None:
        self.cluster = cluster
        self._members = {m.host: SandboxHosts(s) for s in cluster.sets.values()
                         for m in s.spec.members}  # fmt: skip

    def _member(self, host: str) -> SandboxHosts | None:
        return self._members.get(host)

    def _router_pid(self, host: str) -> int:
        if host not in self.cluster.spec.routers:
            raise TargetError(f"{host} is no member or router of this cluster")
        pid = self.cluster.router_pid(host)
        if pid is None:
            raise TargetError(f"router {host} is not running")
        return pid

    def _signal(self, host: str, signum: signal.Signals) -> int:
        pid = self._router_pid(host)
        signal_process(pid, signum)
        return pid

    def pid(self, host: str) -> int | None:
        member = self._member(host)
        return member.pid(host) if member else self.cluster.router_pid(host)

    def kill(self, host: str) -> int:
        """SIGKILL the member or router and wait until it is gone; returns the pid it had."""
        member = self._member(host)
        if member is not None:
            return member.kill(host)
        self._router_pid(host)  # a host of the cluster's
        try:
            return self.cluster.kill_router(host)
        except SandboxError as exc:
            raise TargetError(str(exc)) from exc

    def stop(self, host: str) -> int:
        member = self._member(host)
        return member.stop(host) if member else self._signal(host, signal.SIGSTOP)

    def cont(self, host: str) -> int:
        member = self._member(host)
        return member.cont(host) if member else self._signal(host, signal.SIGCONT)

    def start(self, host: str, *, wipe: bool, boot_s: float = 0.0) -> None:
        member = self._member(host)
        if member is not None:
            member.start(host, wipe=wipe, boot_s=boot_s)
            return
        try:
            self.cluster.restart_router(host)
        except SandboxError as exc:
            raise TargetError(str(exc)) from exc

    def wipe(self, host: str) -> None:
        member = self._member(host)
        if member is None:
            raise TargetError(f"router {host} has no data to wipe")
        member.wipe(host)

    def restart_action(self, host: str, *, wipe: bool) -> dict[str, object]:
        member = self._member(host)
        if member is not None:
            return member.restart_action(host, wipe=wipe)
        return {"action": "sandbox-router-start", "dir": str(self.cluster.directory),
                "host": host}  # fmt: skip


class ShardedSandboxTarget:
    platform = "sandbox"
    topology = "sharded"

    def __init__(self, config: Target, directory: Path) -> None:
        self.config = config
        self.directory = directory.resolve()  # journaled: `recover` may run elsewhere
        size = cluster_size(config.shards, config.shard_topology, config.mongos)
        port_base = config.port_base or free_port_base(size)
        self.settings = settings_of(config)
        specs, routers = plan_cluster(port_base=port_base, shards=config.shards,
                                      shard_topology=config.shard_topology,
                                      routers=config.mongos, settings=self.settings,
                                      zones=config.zones)  # fmt: skip
        self.port_base = port_base
        hosts = {name: tuple(m.host for m in spec.members) for name, spec in specs.items()}
        self.layout = ShardedLayout(config=hosts.pop(CONFIG_SET), shards=hosts, routers=routers)
        self.members = self.layout.members()
        self.uri = routers_uri(routers)
        self.connect_options = ConnectOptions.from_uri(self.uri)
        self._cluster: ShardedSandbox | None = None

    @property
    def keep(self) -> bool:
        return self.config.keep

    @property
    def hosts(self) -> ProcessHosts:
        if self._cluster is None:
            raise TargetError("the sandbox is not up")
        return ShardedHosts(self._cluster)

    def setup(self) -> None:
        try:
            self._cluster = up_sharded(self.directory, port_base=self.port_base,
                                       shards=self.config.shards,
                                       shard_topology=self.config.shard_topology,
                                       routers=self.config.mongos,
                                       settings=self.settings,
                                       balancer=self.config.balancer,
                                       zones=self.config.zones)  # fmt: skip
        except SandboxError as exc:
            raise TargetError(f"sandbox: {exc}") from exc

    def prepare(self) -> None:
        """Nothing: `setup` built the cluster as the run needs it."""

    def teardown(self) -> None:
        if self._cluster is None or self.config.keep:
            return
        self._cluster.down()
        for sandbox in self._cluster.sets.values():
            sandbox.drop_data_files()  # the events, logs and rollback files stay

    def faultfs_mountpoint(self, host: str) -> Path | None:
        """None: a sharded sandbox's members are not on faultfs."""
        return None

    def small_disk(self, host: str) -> Path | None:
        return None

    def recover_action(self) -> dict[str, object] | None:
        return {"action": "sandbox-down", "dir": str(self.directory)}

    def events_path(self, host: str) -> Path:
        sandbox = self._set_of(host)
        return member_dir(sandbox.directory, sandbox.spec.member(host)) / "events.jsonl"

    def _set_of(self, host: str) -> Sandbox:
        name = self.layout.set_of(host)
        if self._cluster is None or name is None:
            raise TargetError(f"{host}: no member of this sandbox")
        return self._cluster.sets[CONFIG_SET if name == CONFIG else name]


if TYPE_CHECKING:
    _RUN_TARGET: type[RunTarget] = ShardedSandboxTarget
