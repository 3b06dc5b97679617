"""The network-degrade proxy's own added latency, and how exactly it adds a shaped one.

Starts an emulator rs1 and times `ping` round trips from a pymongo client (direct connection),
interleaving rounds straight to the member and rounds through the proxy (the member's client
links redirected by nftables, as `kind: network-degrade, between: clients` does):

- `pass-through`: the proxy with nothing to shape (its plain copy loop);
- `zero shape`: a shape of 0 ms (its pacing queue, what every shaped fault pays);
- `+N ms`: latency N each way: the added round trip should be 2 N.

Prints p50 and p99 per mode, and p50/p99 minus the straight round trip's.

Usage: python bench/degrade_proxy.py [--pings 400] [--rounds 3] [--latency 20ms]
       [--port-base 29600] (root; needs `nft`)
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from pymongo import MongoClient

from rsdrill.analysis.latency import percentile
from rsdrill.fields import parse_duration
from rsdrill.platforms.machine.degrade import Degradation, NetworkDegrade
from rsdrill.platforms.machine.proxy import Shape
from rsdrill.platforms.sandbox.target import SandboxHosts, free_port_base
from rsdrill.sandbox.cluster import EmulatorEngine, Sandbox, up
from rsdrill.sandbox.config import build_topology


def _pings(client: MongoClient[dict[str, object]], count: int) -> list[float]:
    times = []
    for _ in range(count):
        start = time.perf_counter()
        client.admin.command("ping")
        times.append((time.perf_counter() - start) * 1000)
    return times


def _through(sandbox: Sandbox, host: str, shape: Shape | None, count: int) -> list[float]:
    how = Degradation(shape or Shape(), "clients", "both")
    degrade = NetworkDegrade(SandboxHosts(sandbox), host, [host], how, seed=1)
    if shape is None:  # no pacing at all: the listener forwards as it reads
        degrade.how = _Unshaped(how.shape, how.between, how.direction)
    degrade.inject()
    try:
        with MongoClient(host, directConnection=True) as client:
            client.admin.command("ping")  # the connection made through the proxy
            if not degrade.verify(5):
                raise SystemExit("the client's connection was not redirected")
            return _pings(client, count)
    finally:
        degrade.revert()


class _Unshaped(Degradation):
    """Neither direction shaped: the proxy only copies."""

    def shapes(self) -> tuple[Shape | None, Shape | None]:
        return None, None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pings", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--latency", default="20ms")
    parser.add_argument("--port-base", type=int, default=None)
    args = parser.parse_args()
    latency = parse_duration(args.latency)
    modes: dict[str, Shape | None] = {
        "pass-through": None,
        "zero shape": Shape(),
        f"+{latency * 1000:g} ms": Shape(latency_s=latency),
    }
    times: dict[str, list[float]] = {"straight": [], **{m: [] for m in modes}}
    with tempfile.TemporaryDirectory() as tmp:
        spec = build_topology("rs1", port_base=args.port_base or free_port_base(1))
        sandbox = up(Path(tmp), spec, EmulatorEngine())
        host = spec.members[0].host
        try:
            for _ in range(args.rounds):
                with MongoClient(host, directConnection=True) as client:
                    client.admin.command("ping")
                    times["straight"] += _pings(client, args.pings)
                for mode, shape in modes.items():
                    times[mode] += _through(sandbox, host, shape, args.pings)
        finally:
            sandbox.down()
    base = {p: percentile(sorted(times["straight"]), p) for p in (50, 99)}
    print(f"{args.rounds} rounds x {args.pings} pings per mode (ms)")
    print(f"{'mode':>14} {'p50':>8} {'p99':>8} {'p50-base':>9} {'p99-base':>9}")
    for mode, values in times.items():
        p50, p99 = percentile(sorted(values), 50), percentile(sorted(values), 99)
        print(f"{mode:>14} {p50:8.3f} {p99:8.3f} {p50 - base[50]:9.3f} {p99 - base[99]:9.3f}")
    shaped = sorted(times[f"+{latency * 1000:g} ms"])
    added = percentile(shaped, 50) - base[50]
    print(f"added round trip at p50: {added:.2f} ms for 2 x {latency * 1000:g} ms "
          f"({added / (2 * latency * 1000):.3f} of it)")  # fmt: skip


if __name__ == "__main__":
    main()
