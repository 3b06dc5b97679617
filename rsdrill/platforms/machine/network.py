"""network-partition on this machine (`platform: sandbox` and `platform: local`): nftables rules
that drop a member's packets to or from the other members, its clients, or both.

Members and clients all talk over loopback, so who sent a packet is told by its process: each
member process carries its own net_cls class (see `netcls.py`), every other process is a client.
A connection is classified on every packet its initiator sends to a member port (`ct mark`
becomes the initiator's class), so both of its directions can be judged on the receiving side:

- a packet to member port P is from the connection's initiator to the member on P;
- a packet from member port P is from the member on P to the connection's initiator.

Packets are dropped on input, silently, as a broken network does: senders see timeouts, not
errors, and established connections stall as well as new ones (conntrack picks them up
midstream). `inbound` drops what the member would receive from the cut-off side, `outbound` what
it would send there; over TCP either one stalls every exchange that needs an answer, yet the
packets that do pass still arrive (e.g. with `outbound` a client's write reaches the member and
is applied, its acknowledgement never comes back).

Each fault is one nftables table `rsdrill-<port>-<token>`, added and deleted atomically; its
removal is journaled first (`network-heal`), so `rsdrill recover` deletes it after a crash. The
conntrack entries of the connections to its members are forgotten when one starts and when one
ends, and only theirs (marks are per member port), so a partition of another set on this machine
keeps its own.
"""

from __future__ import annotations

import itertools
import os
import secrets
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from rsdrill.layout import ShardedLayout, same_set
from rsdrill.platforms.base import InjectionError, ProcessHosts, TargetError
from rsdrill.platforms.machine import conntrack, netcls
from rsdrill.platforms.partition_shapes import PartitionShape, cut_pairs

if TYPE_CHECKING:
    from rsdrill.faults import NetworkPartitionFault
    from rsdrill.platforms.base import MachineTarget

TABLE_PREFIX = "rsdrill-"
NFT_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 0.5
_CONNTRACK_LOOSE = Path("/proc/sys/net/netfilter/nf_conntrack_tcp_loose")

IsolateFrom = Literal["members", "clients", "all"]
Direction = Literal["both", "inbound", "outbound"]


def host_port(host: str) -> int:
    """The port of a `host:port` address."""
    return int(host.rsplit(":", 1)[1])


def _address(host: str) -> tuple[str, int]:
    name, port = host.rsplit(":", 1)
    return name.strip("[]"), int(port)


@dataclass(frozen=True)
class Cut:
    """What one partition drops: the member on `port` from `peers` (the other members' ports)
    and/or its clients, in one or both directions."""

    port: int
    peers: tuple[int, ...]
    isolate_from: IsolateFrom
    direction: Direction

    def drop_rules(self) -> list[str]:
        """The input-side rules (nftables syntax), one per line."""
        me, client = netcls.class_id(self.port), netcls.client_mark(self.port)
        peers = _set(self.peers)
        peer_classes = _set(netcls.class_id(p) for p in self.peers)
        rules: list[str] = []
        members = self.isolate_from in ("members", "all") and bool(self.peers)
        clients = self.isolate_from in ("clients", "all")
        if self.direction in ("both", "inbound"):  # packets the member would receive
            if members:
                rules.append(f"tcp dport {self.port} ct mark {peer_classes} drop")
                rules.append(f"tcp sport {peers} ct mark {me:#x} drop")
            if clients:
                rules.append(f"tcp dport {self.port} ct mark {client:#x} drop")
        if self.direction in ("both", "outbound"):  # packets the member would send
            if members:
                rules.append(f"tcp sport {self.port} ct mark {peer_classes} drop")
                rules.append(f"tcp dport {peers} ct mark {me:#x} drop")
            if clients:
                rules.append(f"tcp sport {self.port} ct mark {client:#x} drop")
        return rules

    def ruleset(self, table: str) -> str:
        """The whole table, for `nft -f`."""
        return ruleset(table, [self])


def ruleset(table: str, cuts: list[Cut], members_also: Iterable[int] = ()) -> str:
    """One table holding every cut of `cuts` (a partition shape cuts several members).
    `members_also`: ports of members no cut names whose connections are still a member's, not
    a client's (a zone's other members, which the zone's cut leaves connected)."""
    members = sorted({port for cut in cuts for port in (cut.port, *cut.peers)} | set(members_also))
    ports = _set(members)
    classes = _set(netcls.class_id(p) for p in members)
    clients = ", ".join(f"{p} : {netcls.client_mark(p):#x}" for p in members)
    drops = "\n".join(f'    iif "lo" {rule}' for cut in cuts for rule in cut.drop_rules())
    return (
        f"table inet {table} {{\n"
        "  chain classify {\n"
        "    type filter hook output priority filter; policy accept;\n"
        # Only the initiator's packets (to a member port) say who opened the connection:
        # until it sends, what the member sends on it is unclassified and passes.
        f'    oif "lo" tcp dport {ports} ct mark set tcp dport map {{ {clients} }}\n'
        f'    oif "lo" tcp dport {ports} meta cgroup {classes} ct mark set meta cgroup\n'
        "  }\n"
        "  chain partition {\n"
        "    type filter hook input priority filter; policy accept;\n"
        f"{drops}\n"
        "  }\n"
        "}\n"
    )


def shape_cuts(pairs: list[tuple[str, str]]) -> list[Cut]:
    """One both-ways cut per member for the pairs it heads (each pair cut once)."""
    peers: dict[str, list[int]] = {}
    for a, b in pairs:
        peers.setdefault(a, []).append(host_port(b))
    return [Cut(host_port(a), tuple(ps), "members", "both") for a, ps in peers.items()]


def _set(values: Any) -> str:
    items = [f"{v:#x}" if v > 0xFFFF else str(v) for v in values]
    return items[0] if len(items) == 1 else "{ " + ", ".join(items) + " }"


def _nft_binary() -> str:
    # /usr/sbin is missing from many users' PATH; nft lives there.
    found = shutil.which("nft", path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin")
    if found is None:
        raise InjectionError(
            "network-partition needs the `nft` command (nftables): apt-get install nftables"
        )
    return found


def _nft(args: list[str], script: str | None = None) -> str:
    try:
        done = subprocess.run(
            [_nft_binary(), *args], input=script, capture_output=True, text=True,
            timeout=NFT_TIMEOUT_S, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        command = " ".join(args)
        raise InjectionError(f"nft {command} did not finish in {NFT_TIMEOUT_S:.0f}s") from exc
    if done.returncode != 0:
        detail = " ".join(done.stderr.split()) or f"exit status {done.returncode}"
        if "Operation not permitted" in detail:
            detail = "needs root (CAP_NET_ADMIN): " + detail
        raise InjectionError(f"nft {' '.join(args)}: {detail}")
    return done.stdout


def rsdrill_tables() -> list[str]:
    """The names of the inet tables rsdrill's partitions hold now."""
    out = _nft(["list", "tables", "inet"])
    return [
        name
        for line in out.splitlines()
        if len(fields := line.split()) == 3 and (name := fields[2]).startswith(TABLE_PREFIX)
    ]


def delete_table(table: str) -> bool:
    """Delete `table` if it exists (atomically); whether it did."""
    present = table in rsdrill_tables()
    # Adding first makes the delete succeed whether or not the table exists, in one transaction.
    _nft(["-f", "-"], f"add table inet {table}\ndelete table inet {table}\n")
    return present


def ports_in_use() -> set[int]:
    """The member ports whose class some partition still reads (in its `meta cgroup` set).

    One listing of every inet table: listing rsdrill's tables one by one raced with another
    run deleting its own between the two calls (nft: No such file or directory)."""
    ports: set[int] = set()
    ours = False
    for line in _nft(["list", "ruleset", "inet"]).splitlines():
        if line.startswith("table inet "):
            ours = line.split()[2].startswith(TABLE_PREFIX)
        elif ours and "meta cgroup" in line:
            ports.update(c & 0xFFFF for c in _classes_after(line, "meta cgroup"))
    return ports


def _classes_after(line: str, key: str) -> list[int]:
    """The class ids a listed rule compares `key` with: one value, or a `{ ... }` set (after an
    optional `!=`), in nft's decimal listing."""
    rest = line.split(key, 1)[1].strip().removeprefix("!=").strip()
    if rest.startswith("{"):
        return [int(c) for c in rest[1:].split("}", 1)[0].replace(",", " ").split()]
    return [int(rest.split()[0])] if rest.split() and rest.split()[0].isdigit() else []


def forget_marked_connections(ports: Iterable[int]) -> None:
    """Drop the conntrack entries of the connections that a partition classified to or from
    the members on `ports`, so that none is judged on a stale entry later (see
    `conntrack.py`); the next packet of each connection starts a fresh one."""
    for port in ports:
        conntrack.forget(netcls.class_id(port), 0xFFFFFFFF)
        conntrack.forget(netcls.client_mark(port), 0xFFFFFFFF)


def heal(action: dict[str, Any]) -> str:
    """Revert action `network-heal`: delete the partition's table, then release the member
    processes of its ports from their classes unless another partition still uses them.
    Idempotent."""
    lines = []
    try:
        if delete_table(action["table"]):
            lines.append(f"deleted nftables table {action['table']}")
        ports = set(action.get("ports", netcls.tagged_ports()))
        lines += netcls.release(ports - ports_in_use())
        forget_marked_connections(ports)
    except (InjectionError, netcls.NetClsError, conntrack.ConntrackError) as exc:
        raise TargetError(str(exc)) from exc
    what = "; ".join(lines) if lines else "nothing left to remove"
    return f"{action['host']}: partition healed ({what})"


def rejoin_partition(pid: int, port: int) -> None:
    """A member restarted while a partition is in force: its new process joins its class, so
    its own new connections are a member's again, not a client's."""
    try:
        netcls.rejoin(pid, port)
    except netcls.NetClsError as exc:
        raise TargetError(str(exc)) from exc


class NetworkPartition:
    """Cut one member off from the other members, its clients, or both, for a while."""

    kind = "network-partition"

    def __init__(
        self,
        hosts: ProcessHosts,
        target: str,
        members: list[str],
        *,
        isolate_from: IsolateFrom,
        direction: Direction,
        shape: PartitionShape = "one",
        flapping: float | None = None,
        peers: list[str] | None = None,
    ) -> None:
        self.hosts = hosts
        self.target = target
        self.members = members
        # The members it is cut from: all the others, or (a zone's outage) those outside it.
        self.peers = [m for m in members if m != target] if peers is None else peers
        self.ports = [host_port(m) for m in members]
        peer_ports = tuple(host_port(p) for p in self.peers)
        self.cut = Cut(host_port(target), peer_ports, isolate_from, direction)
        self.shape = shape
        self.pairs = cut_pairs(shape, target, members)
        self.cuts = [self.cut] if shape == "one" else shape_cuts(self.pairs)
        self.flapping = flapping
        self.table = f"{TABLE_PREFIX}{self.cut.port}-{secrets.token_hex(4)}"
        self._stop = threading.Event()
        # Flapping: held by each turn and by each check of `verify`, which judges the cut only
        # while it is in force (a check may hold the next turn back by its own length).
        self._turn = threading.Lock()
        self._in_force = False
        self._flapper: threading.Thread | None = None

    def describe(self) -> str:
        flap = f", cut and healed every {self.flapping:g}s" if self.flapping else ""
        if self.shape != "one":
            pairs = ", ".join(f"{a}-{b}" for a, b in self.pairs)
            return (
                f"partition shape {self.shape} around {self.target}: cut {pairs} both ways"
                f"{flap} (nftables table {self.table})"
            )
        side = {"members": "the other members", "clients": "its clients",
                "all": "the other members and its clients"}[self.cut.isolate_from]  # fmt: skip
        how = {"both": "both ways", "inbound": "inbound only (they cannot reach it)",
               "outbound": "outbound only (it cannot reach them)"}[self.cut.direction]  # fmt: skip
        kept = f", still reaching {', '.join(self._kept())}" if self._kept() else ""
        return (f"partition {self.target} from {side}{kept}, {how}{flap} "
                f"(nftables table {self.table})")  # fmt: skip

    def revert_action(self) -> dict[str, Any] | None:
        return {
            "action": "network-heal",
            "table": self.table,
            "host": self.target,
            "ports": self.ports,
        }

    def inject(self) -> None:
        if _CONNTRACK_LOOSE.exists() and _CONNTRACK_LOOSE.read_text().strip() == "0":
            raise InjectionError(
                "network-partition: net.netfilter.nf_conntrack_tcp_loose is 0, so established "
                "connections would not be cut; set it to 1 (sysctl -w)"
            )
        _nft_binary()
        try:
            for host in self.members:
                pid = self.hosts.pid(host)
                if pid is None:
                    if host == self.target:
                        raise InjectionError(f"network-partition {host}: no process found")
                    continue  # a member that is down has nothing to send
                netcls.place(pid, host_port(host))
        except netcls.NetClsError as exc:
            raise InjectionError(f"network-partition {self.target}: {exc}") from exc
        self._cut()
        self._in_force = True
        if self.flapping:
            self._flapper = threading.Thread(
                target=self._flap, args=(time.monotonic(),), name="flapping", daemon=True
            )
            self._flapper.start()

    def _cut(self) -> None:
        _nft(["-f", "-"], ruleset(self.table, self.cuts, self.ports))
        try:
            forget_marked_connections(self.ports)
        except conntrack.ConntrackError as exc:
            raise InjectionError(f"network-partition {self.target}: {exc}") from exc

    def _flap(self, cut_at: float) -> None:
        """Heal and cut again in turn until reverted (the member classes stay placed), each turn
        `flapping` seconds after the first cut's: a turn's own work (nft, conntrack: a tenth of
        a second on a busy machine) does not push the later turns back."""
        assert self.flapping is not None
        for turn in itertools.count(1):
            if self._stop.wait(max(0.0, cut_at + turn * self.flapping - time.monotonic())):
                return
            with self._turn:
                try:
                    if self._in_force:
                        delete_table(self.table)
                        forget_marked_connections(self.ports)
                    else:
                        self._cut()
                except (InjectionError, conntrack.ConntrackError):
                    continue  # tried again at the next turn; revert deletes the table anyway
                self._in_force = not self._in_force

    def verify(self, timeout_s: float) -> bool:
        """The member is unreachable from each side it is cut off from, reachable from the
        other: a TCP connection from a client (this process) and one from a process placed in
        a peer's class."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._turn:
                if self._in_force and self._as_expected():
                    return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)

    def _as_expected(self) -> bool:
        if self.shape != "one":
            return self._shape_holds()
        clients_cut = self.cut.isolate_from in ("clients", "all")
        if connects(self.target) == clients_cut:
            return False
        peer = next((p for p in self.peers if netcls.placed_pids(host_port(p))), None)
        if peer is None:
            return True  # no peer running: only the client side can be checked
        members_cut = self.cut.isolate_from in ("members", "all")
        if connects_as(peer, self.target) == members_cut:
            return False
        kept = next((m for m in self._kept() if netcls.placed_pids(host_port(m))), None)
        return kept is None or connects_as(kept, self.target)

    def _kept(self) -> list[str]:
        """The members it stays connected to (the rest of its zone, in a zone's outage)."""
        return [m for m in self.members if m != self.target and m not in self.peers]

    def _shape_holds(self) -> bool:
        """A cut pair cannot connect (either way); a pair the shape leaves can."""
        running = [m for m in self.members if netcls.placed_pids(host_port(m))]
        cut = [(a, b) for a, b in self.pairs if a in running and b in running]
        kept = [
            (a, b) for a in running for b in running
            if a < b and (a, b) not in self.pairs and (b, a) not in self.pairs
        ]  # fmt: skip
        if cut and (connects_as(*cut[0]) or connects_as(cut[0][1], cut[0][0])):
            return False
        return not kept or connects_as(*kept[0])

    def revert(self) -> None:
        self._stop.set()
        if self._flapper is not None:
            self._flapper.join()
        try:
            heal(self.revert_action() or {})
        except TargetError as exc:
            raise InjectionError(str(exc)) from exc


def connects(host: str, timeout_s: float = CONNECT_TIMEOUT_S) -> bool:
    """Whether a TCP connection from this process to `host` completes."""
    try:
        with socket.create_connection(_address(host), timeout=timeout_s):
            return True
    except OSError:
        return False


_CONNECT_SCRIPT = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])).close()
except OSError:
    sys.exit(1)
"""


def connects_as(member: str, host: str, timeout_s: float = CONNECT_TIMEOUT_S) -> bool:
    """Whether a TCP connection to `host` completes from a process in `member`'s class (what
    that member's own connections meet)."""
    root = netcls.hierarchy()
    if root is None:
        raise InjectionError("no net_cls hierarchy is mounted")
    procs = root / netcls.GROUP / str(host_port(member)) / "cgroup.procs"
    name, port = _address(host)
    # The shell joins the class before exec: every socket the probe opens carries it.
    argv = ["sh", "-c", 'echo $$ > "$0" && exec "$@"', str(procs), sys.executable, "-I", "-S",
            "-c", _CONNECT_SCRIPT, name, str(port), str(timeout_s)]  # fmt: skip
    try:
        done = subprocess.run(argv, capture_output=True, timeout=timeout_s + 10, check=False)
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0


def network_partition(
    target: MachineTarget, fault: NetworkPartitionFault, host: str
) -> NetworkPartition:
    """network-partition of a member process: nftables rules on loopback. On a sharded
    target, "members" are the member's own replica set's; the other sets' members and the
    routers are among its clients (the sets talk to each other as clients do)."""
    layout = getattr(target, "layout", None)
    members = same_set(target.members, layout if isinstance(layout, ShardedLayout) else None, host)
    return NetworkPartition(target.hosts, host, members,
                            isolate_from=fault.isolate_from, direction=fault.direction,
                            shape=fault.shape, flapping=fault.flapping)  # fmt: skip
