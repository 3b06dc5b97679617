"""Failover after SIGKILL (or SIGSTOP) of an idle primary, repeated: the distribution a probe
should see.

Prints, per kill and in summary, the client-side time from the kill to the first successful
w:majority write, the ground truth from the new primary's event log (kill → election won →
writable), and the elections it took (more than one: split votes, where each candidate voted for
itself). Usage: python bench/failover.py [--kills 10] [--election-timeout 10000] [--freeze]
[--heartbeat-interval 2000]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from pymongo import MongoClient, WriteConcern
from pymongo.errors import PyMongoError

from rsdrill.sandbox.cluster import EmulatorEngine, Sandbox, up
from rsdrill.sandbox.config import ReplSetSpec, Settings, build_topology, member_dir
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


def _elections_since(sandbox: Sandbox, spec: ReplSetSpec, since: float) -> tuple[int, int]:
    """(elections called, elections lost) by any member after `since` (monotonic)."""
    called = lost = 0
    for member in spec.members:
        for e in read_events(member_dir(sandbox.directory, member) / "events.jsonl"):
            if e["t_mono"] >= since:
                called += e["event"] == "election_called"
                lost += e["event"] == "election_lost"
    return called, lost


def run(
    kills: int, settings: Settings, port_base: int, freeze: bool = False
) -> list[dict[str, float]]:
    spec = build_topology("rs3", port_base=port_base, settings=settings)
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
                if freeze:
                    sandbox.stop(spec.member(old))
                else:
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
                called, lost = _elections_since(sandbox, spec, killed_at)
                rows.append(
                    {
                        "client_s": client_s,
                        "elected_s": won - killed_at,
                        "writable_s": writable - killed_at,
                        "elections": called,
                        "lost": lost,
                    }
                )
                print(
                    f"kill {i + 1:2d}: {old} -> {new}  election won {won - killed_at:6.2f}s  "
                    f"writable {writable - killed_at:6.2f}s  client write {client_s:6.2f}s  "
                    f"elections {called} (lost {lost})",
                    flush=True,
                )
                if freeze:
                    sandbox.cont(spec.member(old))
                else:
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
    parser.add_argument("--heartbeat-interval", type=int, default=2000)
    parser.add_argument("--port-base", type=int, default=29317)
    parser.add_argument("--freeze", action="store_true", help="SIGSTOP the primary, not SIGKILL")
    args = parser.parse_args()
    settings = Settings(
        election_timeout_ms=args.election_timeout, heartbeat_interval_ms=args.heartbeat_interval
    )
    rows = run(args.kills, settings, args.port_base, args.freeze)
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
    split = sum(1 for r in rows if r["elections"] > 1)
    print(
        f"failovers that took more than one election (split votes): {split}/{len(rows)}; "
        f"elections {sum(r['elections'] for r in rows)}, lost {sum(r['lost'] for r in rows)}"
    )
    inside = sum(1 for r in rows if bound_low <= r["client_s"] <= bound_high)
    print(
        f"client-side failover inside [{bound_low:.1f}, {bound_high:.1f}] s "
        f"(electionTimeout - one heartbeat .. 1.15 x electionTimeout + 1.2 s): "
        f"{inside}/{len(rows)}"
    )


if __name__ == "__main__":
    main()
