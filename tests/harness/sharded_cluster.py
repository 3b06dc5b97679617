"""A sharded cluster started outside the run (sandbox processes: config servers, two rs3 shards,
two routers), for targets rsdrill finds from their routers (`platform: local`, Kubernetes, EC2,
vSphere) as a user's own cluster."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rsdrill.connection import ConnectOptions
from rsdrill.platforms.machine.local_hosts import listening_pid
from rsdrill.result import Result
from rsdrill.sandbox.config import CONFIG_SET, ClusterSpec, ReplSetSpec, Settings, member_dir
from rsdrill.sandbox.members import hello
from rsdrill.sandbox.sharded import ShardedSandbox, cluster_size, routers_uri, up_sharded
from rsdrill.states import member_state
from tests.harness.members import wait_until

SHARDS = 2
ROUTERS = 2
SIZE = cluster_size(SHARDS, "rs3", ROUTERS)
ELECTION_TIMEOUT_MS = 2000
"""For clusters whose members are killed while transactions or migrations are under way: a
cluster's eleven processes share 2 cores with the other test workers, and with 1 s a member
starved for a second deposed a healthy primary (flapping shard primaries seen under load)."""


@contextlib.contextmanager
def existing_cluster(directory: Path, port_base: int) -> Iterator[Path]:
    """The cluster up (1 s elections, balancer off: a chunk moving would move the probes'
    shards) until the block ends; every process stopped then, also those a run restarted
    by their own start command (found by port)."""
    cluster = up_sharded(directory, port_base=port_base, shards=SHARDS, routers=ROUTERS,
                         settings=Settings(election_timeout_ms=1000),
                         balancer=False)  # fmt: skip
    try:
        yield directory
    finally:
        cluster.down(grace_s=2.0)
        for port in range(port_base, port_base + SIZE):
            pid = listening_pid(port)
            if pid is not None:
                os.kill(pid, signal.SIGKILL)


def uri(directory: Path) -> str:
    """The routers, as the cluster's clients name them."""
    return routers_uri(ClusterSpec.read(directory).routers)


def sets(directory: Path) -> dict[str, list[str]]:
    """Each replica set's members by set name (the config servers' first)."""
    spec = ClusterSpec.read(directory)
    return {name: [m.host for m in spec.set_spec(directory, name).members]
            for name in (CONFIG_SET, *spec.shards)}  # fmt: skip


def routers(directory: Path) -> list[str]:
    return list(ClusterSpec.read(directory).routers)


def local_members(directory: Path) -> list[dict[str, Any]]:
    """`target.members` of a `platform: local` target: each member's and router's own start
    command (and a member's dbpath), as a user would list them."""
    spec = ClusterSpec.read(directory)
    listed = []
    for name in (CONFIG_SET, *spec.shards):
        set_dir = spec.set_dir(directory, name)
        for m in ReplSetSpec.read(set_dir).members:
            listed.append({"host": m.host, "dbpath": str(member_dir(set_dir, m) / "data"),
                           "start": f"{sys.executable} -m rsdrill_emulator --dir {set_dir} "
                                    f"--host {m.host}"})  # fmt: skip
    for host in spec.routers:
        listed.append({"host": host, "start": f"{sys.executable} -m rsdrill_emulator --dir "
                                              f"{directory} --host {host} --router"})  # fmt: skip
    return listed


class ClusterProcesses:
    """What a platform binding asks of a sandbox (`spec.member`, `pid`, `kill`, `start`,
    `stop`, `cont`; tests/harness/ec2_binding.py, vsphere_binding.py), over every replica set
    and router of the cluster, each named by its host:port."""

    def __init__(self, directory: Path) -> None:
        self.cluster = ShardedSandbox(directory)
        self.spec = self
        self._members = {m.host: (sandbox, m) for sandbox in self.cluster.sets.values()
                         for m in sandbox.spec.members}  # fmt: skip

    def member(self, host: str) -> str:
        return host

    def pid(self, host: str) -> int | None:
        if host in self._members:
            sandbox, member = self._members[host]
            return sandbox.pid(member)
        return self.cluster.router_pid(host)

    def kill(self, host: str) -> None:
        if host in self._members:
            sandbox, member = self._members[host]
            sandbox.kill(member)
        else:
            self.cluster.kill_router(host)

    def start(self, host: str, *, wipe: bool = False, boot_s: float = 0.0) -> None:
        if host in self._members:
            sandbox, member = self._members[host]
            sandbox.start(member, wipe=wipe, boot_s=boot_s)
        else:
            self.cluster.restart_router(host)

    def stop(self, host: str) -> None:
        sandbox, member = self._members[host]  # a router's freeze: not bound
        sandbox.stop(member)

    def cont(self, host: str) -> None:
        sandbox, member = self._members[host]
        sandbox.cont(member)


def assert_only_struck_shard_interrupted(
    result: Result,
    sets: dict[str, list[str]],
    struck: str,
    killed: str,
    *,
    killed_may_win: bool = False,
) -> None:
    """The struck shard failed over to another of its own members (or, `killed_may_win`, to
    the killed one back in a new term: a pod re-created at once may win the election its loss
    called, as mongod's may) and its writes through the routers waited for that; the other
    shard lost no primary and its writes went on."""
    other = next(name for name in result.metrics.shards if name != struck)
    hit, spared = result.metrics.shards[struck], result.metrics.shards[other]
    assert hit.new_primary in sets[struck], hit
    assert killed_may_win or hit.new_primary != killed, hit
    assert hit.failover_s is not None and 0 < hit.failover_s < 15, hit
    assert hit.write_unavailable_s is not None and hit.write_unavailable_s > 0.5, hit
    # Its probe's longest gap is its own cadence, not an election.
    assert spared.failover_s is None and spared.writes > 50, spared
    assert spared.write_unavailable_s is not None and spared.write_unavailable_s < 2.0, spared


def wait_back_as_secondary(host: str, *, or_primary: bool = False) -> None:
    """Until the restarted member answers as a secondary again (30 s at most); `or_primary`,
    as a secondary or the primary (it won the election its loss called: it stays primary)."""
    options = ConnectOptions()
    states = ("SECONDARY", "PRIMARY") if or_primary else ("SECONDARY",)
    wait_until(lambda: member_state(host, 1.0, options=options) in states, 30,
               f"{host} back as a {' or '.join(states).lower()}")  # fmt: skip


def describe(cluster: ShardedSandbox, log_lines: int = 30) -> str:
    """What a failed test of the cluster prints: each member's own word (writable or not, the
    primary it knows, its electionId: the term it won) and the end of each router's log (the
    primaries it found and lost)."""
    options = ConnectOptions()
    lines = []
    for name, sandbox in cluster.sets.items():
        for member in sandbox.spec.members:
            reply = hello(member.host, 2.0, options=options)
            said = "no answer" if reply is None else ", ".join(
                f"{k}={reply.get(k)}" for k in ("isWritablePrimary", "secondary", "primary",
                                                "electionId"))  # fmt: skip
            lines.append(f"{name} {member.host} (pid {sandbox.pid(member)}): {said}")
    for host in cluster.spec.routers:
        log = cluster.spec.router_dir(cluster.directory, host) / "router.log"
        tail = log.read_text(errors="replace").splitlines()[-log_lines:] if log.exists() else []
        lines += [f"--- {log} (pid {cluster.router_pid(host)}), its last lines:", *tail]
    return "\n".join(lines)
