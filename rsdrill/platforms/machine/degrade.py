"""network-degrade on this machine (`platform: sandbox` and `platform: local`): a member's links
routed through a pacing TCP proxy (`proxy.py`) for `duration`.

Routing: one nftables table `rsdrill-<port>-<token>` redirects (nat, output hook on loopback)
new connections of the degraded links to the proxy's listeners; members are told from clients
by their net_cls class, as for partitions (`netcls.py`):

- to the member, from its clients and/or from the other members: the proxy's first listener,
  what flows to the member is its inbound direction;
- from the member to each other member: one listener per peer, what flows there is outbound.

NAT only acts on a connection's first packet, so connections opened before the fault would
pass undisturbed: the same table resets them (`reject with tcp reset`) on the next packet their
initiator sends, and the initiator reconnects through the proxy. The user sees that as one
connection error per pooled connection at injection. Reverting deletes the table first (new
connections go straight again), then stops the proxy, which closes the proxied connections.

The table's removal and the proxy's end are journaled before anything is done
(`network-undegrade`): `rsdrill recover` finds the proxy by the token in its command line.
"""

from __future__ import annotations

import json
import os
import secrets
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from rsdrill.platforms.base import InjectionError, ProcessHosts, TargetError
from rsdrill.platforms.machine import netcls
from rsdrill.platforms.machine.network import TABLE_PREFIX, Direction, _nft, heal, host_port
from rsdrill.platforms.machine.proxy import MARK, Listener, Shape, config_json

if TYPE_CHECKING:
    from rsdrill.faults import NetworkDegradeFault
    from rsdrill.platforms.base import Injector, MachineTarget

Between = Literal["members", "clients", "all"]
PROXY_MODULE = "rsdrill.platforms.machine.proxy"
START_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Degradation:
    """What a degraded direction does (see `proxy.Shape`), and which of the member's links and
    directions carry it."""

    shape: Shape
    between: Between
    direction: Direction

    def shapes(self) -> tuple[Shape | None, Shape | None]:
        """(inbound, outbound) shapes of the member's traffic."""
        inbound = self.shape if self.direction in ("both", "inbound") else None
        outbound = self.shape if self.direction in ("both", "outbound") else None
        return inbound, outbound


def listeners(port: int, peers: tuple[int, ...], how: Degradation) -> list[Listener]:
    """The proxy's listeners: first the member's own port, then (links to members) each peer's."""
    inbound, outbound = how.shapes()
    found = [Listener(port, inbound, outbound)]
    if how.between in ("members", "all"):
        found += [Listener(p, outbound, inbound) for p in peers]
    return found


def ruleset(
    table: str, port: int, peers: tuple[int, ...], between: Between, proxy_ports: list[int]
) -> str:
    """The table for `nft -f`: redirect the degraded links' new connections to `proxy_ports`
    (as `listeners` orders them), reset their connections that were made before."""
    me = f"{netcls.class_id(port):#x}"
    members = _set([netcls.class_id(p) for p in (port, *peers)])
    peer_classes = _set([netcls.class_id(p) for p in peers])
    # (match, proxy port) per degraded link, in the order the rules must be tried.
    links: list[tuple[str, int]] = []
    if between in ("members", "all") and peers:
        links.append((f"tcp dport {port} meta cgroup {peer_classes}", proxy_ports[0]))
        outward = zip(peers, proxy_ports[1:], strict=True)
        links += [(f"tcp dport {p} meta cgroup {me}", q) for p, q in outward]
    if between in ("clients", "all"):
        links.append((f"tcp dport {port} meta cgroup != {members}", proxy_ports[0]))
    route = "\n".join(f'    oif "lo" {match} redirect to :{q}' for match, q in links)
    reset = "\n".join(f'    oif "lo" {match} reject with tcp reset' for match, _ in links)
    return (
        f"table inet {table} {{\n"
        "  chain route {\n"
        "    type nat hook output priority -100; policy accept;\n"
        f"    meta mark {MARK:#x} return\n"
        f"{route}\n"
        "  }\n"
        "  chain stale {\n"
        "    type filter hook output priority filter; policy accept;\n"
        f"    meta mark {MARK:#x} accept\n"
        "    ct status dnat accept\n"
        f"{reset}\n"
        "  }\n"
        "}\n"
    )


def _set(values: list[int]) -> str:
    items = [f"{v:#x}" for v in values]
    return items[0] if len(items) == 1 else "{ " + ", ".join(items) + " }"


def proxy_pids(token: str) -> list[int]:
    """Proxy processes started for the fault named `token` (from /proc command lines)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if PROXY_MODULE.encode() in args and any(token.encode() in a for a in args):
            found.append(int(proc.name))
    return found


def _end(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # not ours: gone once /proc no longer has it
            done = 0 if Path(f"/proc/{pid}").exists() else pid
        if done:
            return
        time.sleep(0.02)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return


def undegrade(action: dict[str, Any]) -> str:
    """Revert action `network-undegrade`: delete the table (and release the member classes no
    partition still uses), then stop the proxy. Idempotent."""
    healed = heal(action).replace("partition healed", "links restored")
    pids = proxy_pids(action["token"])
    for pid in pids:
        _end(pid)
    return healed + (f"; stopped proxy {', '.join(map(str, pids))}" if pids else "")


class NetworkDegrade:
    """Route a member's links through the pacing proxy for a while."""

    kind = "network-degrade"

    def __init__(
        self, hosts: ProcessHosts, target: str, members: list[str], how: Degradation, seed: int
    ) -> None:
        self.hosts = hosts
        self.target = target
        self.members = members
        self.how = how
        self.seed = seed
        self.port = host_port(target)
        self.peers = tuple(host_port(m) for m in members if m != target)
        self.token = secrets.token_hex(4)
        self.table = f"{TABLE_PREFIX}{self.port}-{self.token}"
        self._proxy: subprocess.Popen[str] | None = None
        self._proxy_ports: list[int] = []

    def describe(self) -> str:
        shape = self.how.shape
        parts = []
        if shape.latency_s:
            jitter = f" ± {shape.jitter_s * 1000:g} ms" if shape.jitter_s else ""
            parts.append(f"{shape.latency_s * 1000:g} ms{jitter} latency")
        if shape.loss:
            parts.append(f"{shape.loss:.0%} loss (as TCP retransmission stalls)")
        if shape.bandwidth_bytes_s:
            parts.append(f"{shape.bandwidth_bytes_s * 8 / 1e6:g} Mbit/s")
        side = {"members": "the other members", "clients": "its clients",
                "all": "the other members and its clients"}[self.how.between]  # fmt: skip
        way = {"both": "both ways", "inbound": "inbound", "outbound": "outbound"}
        return (
            f"degrade {self.target}'s links to {side}, {way[self.how.direction]}: "
            f"{', '.join(parts)} (proxy, nftables table {self.table})"
        )

    def revert_action(self) -> dict[str, Any] | None:
        return {"action": "network-undegrade", "table": self.table, "host": self.target,
                "token": self.token, "ports": [self.port, *self.peers]}  # fmt: skip

    def inject(self) -> None:
        try:
            for host in self.members:
                pid = self.hosts.pid(host)
                if pid is None:
                    if host == self.target:
                        raise InjectionError(f"network-degrade {host}: no process found")
                    continue
                netcls.place(pid, host_port(host))
        except netcls.NetClsError as exc:
            raise InjectionError(f"network-degrade {self.target}: {exc}") from exc
        self._start_proxy()
        rules = ruleset(self.table, self.port, self.peers, self.how.between, self._proxy_ports)
        _nft(["-f", "-"], rules)

    def _start_proxy(self) -> None:
        config = config_json(self.token, listeners(self.port, self.peers, self.how), self.seed)
        self._proxy = subprocess.Popen(
            [sys.executable, "-P", "-m", PROXY_MODULE, config], stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, text=True, start_new_session=True,
        )  # fmt: skip
        assert self._proxy.stdout is not None
        ready, _, _ = select.select([self._proxy.stdout], [], [], START_TIMEOUT_S)
        line = self._proxy.stdout.readline() if ready else ""
        if not line:
            self._proxy.kill()
            raise InjectionError(f"network-degrade {self.target}: the proxy did not start")
        self._proxy_ports = json.loads(line)["ports"]

    def verify(self, timeout_s: float) -> bool:
        """Connections of the degraded links go through the proxy: conntrack holds one whose
        original destination is a member and whose answer comes from a proxy listener."""
        deadline = time.monotonic() + timeout_s
        while True:
            if self._proxy is not None and self._proxy.poll() is None and self._redirected():
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)

    def _redirected(self) -> bool:
        listening = {str(p) for p in self._proxy_ports}
        try:
            lines = Path("/proc/net/nf_conntrack").read_text().splitlines()
        except OSError:
            return False
        for line in lines:
            sports = [f.split("=", 1)[1] for f in line.split() if f.startswith("sport=")]
            if len(sports) == 2 and sports[1] in listening:
                return True
        return False

    def revert(self) -> None:
        try:
            undegrade(self.revert_action() or {})
        except TargetError as exc:
            raise InjectionError(str(exc)) from exc
        if self._proxy is not None:
            self._proxy.wait(5)
            if self._proxy.stdout is not None:
                self._proxy.stdout.close()


def network_degrade(target: MachineTarget, fault: NetworkDegradeFault, host: str) -> Injector:
    """network-degrade of a member process: its links through a pacing proxy."""
    rate = fault.bandwidth_mbit_s
    shape = Shape(
        latency_s=fault.latency or 0.0,
        jitter_s=fault.jitter or 0.0,
        loss=fault.loss or 0.0,
        bandwidth_bytes_s=rate * 1e6 / 8 if rate else None,
    )
    return NetworkDegrade(target.hosts, host, list(target.members),
                          Degradation(shape, fault.between, fault.direction),
                          seed=secrets.randbits(32))  # fmt: skip
