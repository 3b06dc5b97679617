"""The probes' own load on a quiet rs3 sandbox, counted on the server side.

Brings up an rs3 sandbox, reads every member's serverStatus opcounters (counted as mongod does:
a CRUD command under its kind only, a secondary's oplog fetch as a getmore) over a window with no
probe running (the set's own traffic: heartbeats), then over a window with the probes running at
their defaults (availability and failover every 20 ms), and prints the difference per second:
the probes' requests as the servers counted them, and apart from them the replication their
writes cause (getmore: each write fetched by the secondaries). Per probe: the requests each one
sent per second, from the history (each recorded op is one request to one server). `--probes`
narrows the set (e.g. `availability,durability,failover`, the issue's target configuration).

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


def window(members: list[str], seconds: float) -> dict[str, float]:
    """Per opcounter kind, operations per second on the servers over `seconds` (the
    serverStatus calls included: one per member at each end, negligible over the window)."""
    before = server_ops(members)
    time.sleep(seconds)
    after = server_ops(members)
    return {kind: (after[kind] - before[kind]) / seconds for kind in after}


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
            history = History()
            probes = ProbeSet(config, uri=sandbox.uri, members=members,
                              options=sandbox.connect_options, history=history,
                              run_id="load")  # fmt: skip
            probes.prepare()
            time.sleep(2)  # let the set settle after the first writes
            quiet = window(members, args.seconds)
            clock = RunClock.start()
            probes.start(clock)
            time.sleep(2)  # connections and handshakes are not the steady load
            started = clock.now()
            loaded = window(members, args.seconds)
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


if __name__ == "__main__":
    main()
