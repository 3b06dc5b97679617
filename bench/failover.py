"""Failover after SIGKILL of an idle primary, repeated: the distribution a probe should see.

Prints, per kill and in summary, the client-side time from the kill to the first successful
w:majority write, and the ground truth from the new primary's event log (kill → election won →
writable). Usage: python bench/failover.py [--kills 10] [--election-timeout 10000]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from pymongo import MongoClient, WriteConcern
from pymongo.errors import PyMongoError

from rsdrill.sandbox.cluster import EmulatorEngine, up
from rsdrill.sandbox.config import Settings, build_topology, member_dir
from rsdrill.sandbox.groundtruth import read_events


def _writable_primary(hosts: list[str]) -> str | None:
    for host in hosts:
        try:
            with MongoClient(host, directConnection=True, serverSelectionTimeoutMS=300) as c:
                if c.admin.command("hello").get("isWritablePrimary"):
                    return host
        except PyMongoError:
            pass
    return None


def _state(host: str) -> str | None:
    try:
        with MongoClient(host, directConnection=True, serverSelectionTimeoutMS=300) as c:
            members = c.admin.command("replSetGetStatus")["members"]
            return next(m["stateStr"] for m in members if m.get("self"))
    except PyMongoError:
        return None


def run(kills: int, election_timeout_ms: int, port_base: int) -> list[dict[str, float]]:
    spec = build_topology(
        "rs3", port_base=port_base, settings=Settings(election_timeout_ms=election_timeout_ms)
    )
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        sandbox = up(Path(tmp) / "sandbox", spec, EmulatorEngine())
        hosts = [m.host for m in spec.members]
        client: MongoClient = MongoClient(
            sandbox.uri,
            socketTimeoutMS=500,
            connectTimeoutMS=500,
            serverSelectionTimeoutMS=500,
            retryWrites=False,
        )
        coll = client.bench.get_collection("probe", write_concern=WriteConcern(w="majority"))
        try:
            for i in range(kills):
                coll.insert_one({"warm": i})
                old = _writable_primary(hosts)
                assert old is not None, "no primary before the kill"
                time.sleep(1.0)
                killed_at = time.monotonic()
                sandbox.kill(spec.member(old))
                while True:
                    try:
                        coll.insert_one({"after": i})
                        break
                    except PyMongoError:
                        time.sleep(0.01)
                client_s = time.monotonic() - killed_at
                new = _writable_primary(hosts)
                events = read_events(
                    member_dir(sandbox.directory, spec.member(new)) / "events.jsonl"
                )
                won = max(e["t_mono"] for e in events if e["event"] == "election_won")
                writable = max(e["t_mono"] for e in events if e["event"] == "writable")
                rows.append(
                    {
                        "client_s": client_s,
                        "elected_s": won - killed_at,
                        "writable_s": writable - killed_at,
                    }
                )
                print(
                    f"kill {i + 1:2d}: {old} -> {new}  election won {won - killed_at:6.2f}s  "
                    f"writable {writable - killed_at:6.2f}s  client write {client_s:6.2f}s",
                    flush=True,
                )
                sandbox.start(spec.member(old))
                while _state(old) != "SECONDARY":
                    time.sleep(0.05)
        finally:
            client.close()
            sandbox.down()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--election-timeout", type=int, default=10_000)
    parser.add_argument("--port-base", type=int, default=29317)
    args = parser.parse_args()
    rows = run(args.kills, args.election_timeout, args.port_base)
    timeout_s = args.election_timeout / 1000
    # MongoDB's bounds: electionTimeout less one heartbeat (never below half of it) up to
    # 1.15 x electionTimeout + 1.2 s, plus 0.5 s for a client to find the new primary.
    bound_low = max(timeout_s - 2.0, timeout_s / 2)
    bound_high = 1.15 * timeout_s + 1.2 + 0.5
    for key in ("elected_s", "writable_s", "client_s"):
        values = sorted(r[key] for r in rows)
        print(
            f"{key:11s} min {values[0]:6.2f}  median {statistics.median(values):6.2f}  "
            f"max {values[-1]:6.2f}  (n={len(values)})"
        )
    inside = sum(1 for r in rows if bound_low <= r["client_s"] <= bound_high)
    print(
        f"client-side failover inside [{bound_low:.1f}, {bound_high:.1f}] s "
        f"(electionTimeout - one heartbeat .. 1.15 x electionTimeout + 1.2 s): "
        f"{inside}/{len(rows)}"
    )


if __name__ == "__main__":
    main()
