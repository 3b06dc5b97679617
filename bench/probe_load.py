"""The probes' own load on a quiet rs3 sandbox, counted on the server side.

Brings up an rs3 sandbox, reads every member's serverStatus opcounters (counted as mongod does:
a CRUD command under its kind only, a secondary's oplog fetch as a getmore) over a window with no
probe running (the set's own traffic: heartbeats), then over a window with the probes running at
their defaults (availability and failover every 20 ms), and prints the difference per second:
the probes' requests as the servers counted them, and apart from them the replication their
writes cause (getmore: each write fetched by the secondaries). Per probe: the requests each one
sent per second, from the history (each recorded op is one request to one server). `--probes`
narrows the set (e.g. `availability,durability,failover`, the issue's target configuration).
Per member, both windows: its CPU (% of a core) and how often its threads went to sleep (each
wake-up of a sleeping process costs CPU of its own: ~0.17-0.28 ms on these VMs).

Usage: python bench/probe_load.py [--seconds 20] [--port-base 30400] [--probes all]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import Counter
from pathlib import Path

from rsdrill.connection import ConnectOptions, DirectConnection
from rsdrill.experiment.probes import Probes
from rsdrill.history import History, RunClock
from rsdrill.probes import ProbeSet
from rsdrill.procstat import cpu_seconds
from rsdrill.sandbox.cluster import EmulatorEngine, up
from rsdrill.sandbox.config import build_topology

PROBES = ("availability", "failover", "recovery", "lag", "durability")


def server_ops(members: list[str]) -> Counter[str]:
    """Every member's opcounters so far, summed over the members."""
    total: Counter[str] = Counter()
    for member in members:
        conn = DirectConnection(member, 2.0, ConnectOptions())
        try:
            counters = conn.command("admin", {"serverStatus": 1})["opcounters"]
        finally:
            conn.close()
        total.update({kind: int(n) for kind, n in counters.items()})
    return total


def sleeps(pid: int) -> int:
    """How often the threads of process `pid` have gone to sleep (voluntary context switches)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        for line in (task / "status").read_text().splitlines():
            if line.startswith("voluntary_ctxt_switches:"):
                total += int(line.split()[1])
    return total


def usage(pids: dict[str, int]) -> dict[str, tuple[float, int]]:
    return {name: (cpu_seconds(pid) or 0.0, sleeps(pid)) for name, pid in pids.items()}


def window(
    members: list[str], pids: dict[str, int], seconds: float
) -> tuple[dict[str, float], dict[str, tuple[float, float]]]:
    """Per opcounter kind, operations per second on the servers over `seconds` (the
    serverStatus calls included: one per member at each end, negligible over the window); per
    member, % of a core and sleeps per second."""
    before, used = server_ops(members), usage(pids)
    time.sleep(seconds)
    after, now = server_ops(members), usage(pids)
    per_member = {
        name: (
            100 * (now[name][0] - used[name][0]) / seconds,
            (now[name][1] - used[name][1]) / seconds,
        )
        for name in pids
    }
    return {kind: (after[kind] - before[kind]) / seconds for kind in after}, per_member


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--port-base", type=int, default=30400)
    parser.add_argument("--probes", default="all", help=f"comma-separated from {PROBES}")
    args = parser.parse_args()
    chosen = PROBES if args.probes == "all" else tuple(args.probes.split(","))
    config = Probes.model_validate({name: ({} if name in chosen else None) for name in PROBES})
    with tempfile.TemporaryDirectory() as tmp:
        sandbox = up(Path(tmp) / "sandbox", build_topology("rs3", port_base=args.port_base),
                     EmulatorEngine())  # fmt: skip
        try:
            members = [m.host for m in sandbox.spec.members]
            pids = {m.name: m.pid for m in sandbox.status() if m.pid is not None}
            history = History()
            probes = ProbeSet(config, uri=sandbox.uri, members=members,
                              options=sandbox.connect_options, history=history,
                              run_id="load")  # fmt: skip
            probes.prepare()
            time.sleep(2)  # let the set settle after the first writes
            quiet, quiet_members = window(members, pids, args.seconds)
            clock = RunClock.start()
            probes.start(clock)
            time.sleep(2)  # connections and handshakes are not the steady load
            started = clock.now()
            loaded, loaded_members = window(members, pids, args.seconds)
            ended = clock.now()
            probes.stop(readback_timeout_s=10)
            counts = Counter(op.probe for op in history if started <= op.t_end <= ended)
        finally:
            sandbox.down()
    span = ended - started
    print(f"rs3, probes: {','.join(chosen)}; window {args.seconds:.0f} s each")
    print(f"{'server ops/s by opcounter':32s} {'set alone':>10s} {'probes on':>10s} {'probes':>8s}")
    for kind in sorted(loaded):
        line = f"{quiet[kind]:10.1f} {loaded[kind]:10.1f} {loaded[kind] - quiet[kind]:8.1f}"
        print(f"  {kind:30s} {line}")
    delta = {kind: loaded[kind] - quiet[kind] for kind in loaded}
    requests = sum(v for kind, v in delta.items() if kind != "getmore")
    print(f"  {'probes, all but getmore':30s} {requests:31.1f}")
    print(f"  {'replication, getmore':30s} {delta.get('getmore', 0.0):31.1f}")
    print("requests sent per second, per probe (from the history):")
    for name, n in sorted(counts.items()):
        print(f"  {name:30s} {n / span:8.1f}")
    print(f"  {'total':30s} {sum(counts.values()) / span:8.1f}")
    print("per member: % of a core, sleeps per second (set alone -> probes on)")
    for name in loaded_members:
        (cpu0, naps0), (cpu1, naps1) = quiet_members[name], loaded_members[name]
        print(f"  {name:30s} {cpu0:5.1f} -> {cpu1:5.1f} %   {naps0:7.1f} -> {naps1:7.1f} /s")


if __name__ == "__main__":
    main()
