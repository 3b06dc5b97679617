"""A sharded sandbox: a config server replica set, N shards (each a replica set), and M
routers, all real processes of the emulator on this machine.

The config servers and each shard are sandboxes of their own in subdirectories of one
directory (`configRS/`, `shard0/`, …), started at once; the routers follow (`routers/<port>/`,
`python -m rsdrill_emulator --router`), and the shards are added through the first of them,
as an operator adds them through mongos. Clients reach the cluster through the routers only:
`ShardedSandbox.uri` names them all.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rsdrill.connection import ConnectOptions, DirectConnection, WireClientError
from rsdrill.sandbox.cluster import (
    EmulatorEngine,
    MemberStatus,
    Sandbox,
    exited_while_starting,
    port_free,
    process_state,
    signal_process,
    spawn,
    up,
    wait_gone,
)
from rsdrill.sandbox.config import (
    CLUSTER_FILE,
    CONFIG_SET,
    TOPOLOGIES,
    ClusterSpec,
    ReplSetSpec,
    Settings,
    build_topology,
)
from rsdrill.sandbox.errors import SandboxError
from rsdrill.sandbox.members import QUERY_TIMEOUT_S, hello

SHARD_TOPOLOGIES = tuple(t for t in TOPOLOGIES if t != "standalone")
START_TIMEOUT_S = 60.0
_POLL_S = 0.02


class ShardedSandbox:
    """A sharded sandbox directory: its replica sets and its router processes."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory.resolve()
        if not (self.directory / CLUSTER_FILE).exists():
            raise SandboxError(f"no sharded sandbox in {self.directory}")
        self.spec = ClusterSpec.read(self.directory)

    @property
    def sets(self) -> dict[str, Sandbox]:
        """Each replica set's sandbox by its name, the config servers' first."""
        return {name: Sandbox(self.spec.set_dir(self.directory, name)) for name in self.spec.sets}

    @property
    def uri(self) -> str:
        return routers_uri(self.spec.routers)

    def _pid_path(self, host: str) -> Path:
        return self.spec.router_dir(self.directory, host) / "router.pid"

    def router_pid(self, host: str) -> int | None:
        path = self._pid_path(host)
        if not path.exists():
            return None
        pid = int(path.read_text())
        return pid if process_state(pid, int(host.rsplit(":", 1)[1])) is not None else None

    def start_router(self, host: str) -> int:
        directory = self.spec.router_dir(self.directory, host)
        directory.mkdir(parents=True, exist_ok=True)
        argv = EmulatorEngine().router_argv(self.directory, host)
        return spawn(argv, directory / "router.log", self._pid_path(host))

    def kill_router(self, host: str) -> int:
        """SIGKILL the router and wait until it is gone; returns the pid it had."""
        pid = self.router_pid(host)
        if pid is None:
            raise SandboxError(f"router {host} is not running")
        signal_process(pid, signal.SIGKILL)
        if wait_gone({self._pid_path(host): pid}, time.monotonic() + 5):
            raise SandboxError(f"router {host} (pid {pid}) survived SIGKILL", exit_code=4)
        return pid

    def restart_router(self, host: str) -> bool:
        """Start the router unless it runs and wait until it answers; whether it was started."""
        if self.router_pid(host) is not None:
            return False
        self.start_router(host)
        deadline = time.monotonic() + START_TIMEOUT_S
        log = self.spec.router_dir(self.directory, host) / "router.log"
        while hello(host, options=ConnectOptions()) is None:
            if self.router_pid(host) is None:
                raise exited_while_starting(f"router {host}", log)
            if time.monotonic() > deadline:
                raise SandboxError(f"router {host} did not come back (see {log})")
            time.sleep(_POLL_S)
        return True

    def router_status(self) -> list[MemberStatus]:
        """Each router: ROUTER when it answers hello, STOPPED when SIGSTOPped, DOWN when its
        process is gone, UNREACHABLE otherwise."""
        found = []
        for host in self.spec.routers:
            pid = self.router_pid(host)
            if pid is None:
                state = "DOWN"
            elif process_state(pid, int(host.rsplit(":", 1)[1])) == "T":
                state = "STOPPED"
            else:
                answered = hello(host, options=ConnectOptions()) is not None
                state = "ROUTER" if answered else "UNREACHABLE"
            found.append(MemberStatus(host, pid, state))
        return found

    def wait_routers(self, deadline: float) -> None:
        for host in self.spec.routers:
            while hello(host, options=ConnectOptions()) is None:
                if self.router_pid(host) is None:
                    log = self.spec.router_dir(self.directory, host) / "router.log"
                    raise exited_while_starting(f"router {host}", log)
                if time.monotonic() > deadline:
                    raise SandboxError(f"router {host} did not answer hello in time", exit_code=4)
                time.sleep(_POLL_S)

    def down(self, grace_s: float = 5.0) -> list[int]:
        """Stop the routers, then every replica set; returns every pid stopped."""
        live = {self._pid_path(h): pid for h in self.spec.routers
                if (pid := self.router_pid(h)) is not None}  # fmt: skip
        for pid in live.values():
            signal_process(pid, signal.SIGTERM)
        remaining = wait_gone(live, time.monotonic() + grace_s)
        for pid in remaining.values():
            signal_process(pid, signal.SIGKILL)
        stopped = sorted(live.values())
        with ThreadPoolExecutor(len(self.spec.sets)) as pool:
            for pids in pool.map(lambda s: s.down(grace_s) if s.exists() else [],
                                 self.sets.values()):  # fmt: skip
                stopped += pids
        return stopped


def routers_uri(routers: tuple[str, ...]) -> str:
    """Every router, as a client of the cluster names them."""
    return f"mongodb://{','.join(routers)}/"


def plan_cluster(
    *,
    port_base: int,
    shards: int = 2,
    shard_topology: str = "rs3",
    routers: int = 2,
    settings: Settings | None = None,
    host: str = "127.0.0.1",
    zones: Sequence[str] = (),
) -> tuple[dict[str, ReplSetSpec], tuple[str, ...]]:
    """Each replica set's spec by name (the config servers' first) and the routers' addresses:
    consecutive ports from `port_base` in that order; `zones` spread over each set's members
    (a data centre holds a member of every set, as clusters are laid out)."""
    if shard_topology not in SHARD_TOPOLOGIES:
        raise SandboxError(f"a shard is a replica set: {', '.join(SHARD_TOPOLOGIES)}, not "
                           f"{shard_topology}")  # fmt: skip
    if shards < 1 or routers < 1:
        raise SandboxError("a sharded cluster needs at least one shard and one router")
    placed = {"zones": tuple(zones)} if zones else {}
    try:
        specs = {CONFIG_SET: build_topology("rs3", port_base=port_base, set_name=CONFIG_SET,
                                            host=host, settings=settings, **placed)}  # fmt: skip
        next_port = port_base + 3
        for i in range(shards):
            spec = build_topology(shard_topology, port_base=next_port, set_name=f"shard{i}",
                                  host=host, settings=settings, **placed)  # fmt: skip
            specs[spec.set_name] = spec
            next_port += len(spec.members)
    except ValueError as exc:  # more zones than a set has members
        raise SandboxError(str(exc)) from None
    return specs, tuple(f"{host}:{next_port + i}" for i in range(routers))


def cluster_size(shards: int, shard_topology: str, routers: int) -> int:
    """How many consecutive ports `plan_cluster` takes."""
    specs, router_hosts = plan_cluster(port_base=1, shards=shards,
                                       shard_topology=shard_topology, routers=routers)  # fmt: skip
    return sum(len(s.members) for s in specs.values()) + len(router_hosts)


def up_sharded(
    directory: Path,
    *,
    port_base: int,
    shards: int = 2,
    shard_topology: str = "rs3",
    routers: int = 2,
    settings: Settings | None = None,
    host: str = "127.0.0.1",
    balancer: bool = True,
    zones: Sequence[str] = (),
) -> ShardedSandbox:
    """Start a sharded cluster in `directory` and return once every router answers and every
    shard is added (and, without `balancer`, the balancer stopped). On any failure every
    process started so far is stopped again."""
    directory = directory.resolve()
    specs, router_hosts = plan_cluster(port_base=port_base, shards=shards,
                                       shard_topology=shard_topology, routers=routers,
                                       settings=settings, host=host, zones=zones)  # fmt: skip
    for address in router_hosts:
        if not port_free(host, int(address.rsplit(":", 1)[1])):
            raise SandboxError(f"port {address} is already in use; choose another --port-base")
    directory.mkdir(parents=True, exist_ok=True)
    cluster = ClusterSpec(tuple(n for n in specs if n != CONFIG_SET), router_hosts, balancer)
    cluster.write(directory)
    sandbox = ShardedSandbox(directory)
    engine = EmulatorEngine()
    try:
        with ThreadPoolExecutor(len(specs)) as pool:
            started = [pool.submit(up, cluster.set_dir(directory, name), spec, engine)
                       for name, spec in specs.items()]  # fmt: skip
            for future in started:
                future.result()
        for address in router_hosts:
            sandbox.start_router(address)
        sandbox.wait_routers(time.monotonic() + START_TIMEOUT_S)
        for name, spec in specs.items():
            if name != CONFIG_SET:
                hosts = ",".join(m.host for m in spec.members)
                _command(router_hosts[0], {"addShard": f"{name}/{hosts}", "name": name})
        if not balancer:
            _command(router_hosts[0], {"balancerStop": 1})
    except BaseException:
        sandbox.down(grace_s=2.0)
        raise
    return sandbox


def _command(host: str, cmd: dict[str, object]) -> dict[str, object]:
    conn = DirectConnection(host, 10 * QUERY_TIMEOUT_S, ConnectOptions())
    try:
        reply = conn.command("admin", cmd)
    except WireClientError as exc:
        raise SandboxError(f"{host}: {next(iter(cmd))}: {exc}", exit_code=4) from exc
    finally:
        conn.close()
    if reply.get("ok") != 1:
        raise SandboxError(f"{host}: {next(iter(cmd))}: {reply.get('errmsg')}", exit_code=4)
    return reply
