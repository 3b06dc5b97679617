"""`python -m rsdrill_emulator --dir D --host 127.0.0.1:P [--init]`: run one member;
`--router`: one router of the sharded cluster in D (see `rsdrill_emulator/router/`)."""

from __future__ import annotations

import argparse
import asyncio
import gc
import signal
import sqlite3
import sys
from contextlib import suppress
from pathlib import Path

import uvloop

from rsdrill.sandbox.config import ReplSetSpec, empty_dir, member_dir
from rsdrill_emulator import diagnostics, election, heartbeat, journal, replconfig, sync
from rsdrill_emulator.commands import Commands, keep_cursors_bounded
from rsdrill_emulator.node import Node
from rsdrill_emulator.server import Server
from rsdrill_emulator.storage import StorageReadError
from rsdrill_emulator.tls import member_server_context


async def run_member(sandbox_dir: Path, host: str, initiate: bool) -> None:
    spec = ReplSetSpec.read(sandbox_dir)
    if spec.storage == "memory":
        # In-memory storage: whatever the last process held died with it.
        empty_dir(member_dir(sandbox_dir, spec.member(host)) / "data")
    node = Node(spec, host, sandbox_dir)
    # A standalone server has nobody to sync from: an empty one starts as a new set of one.
    node.boot(initiate=initiate or spec.standalone)
    replconfig.load(node)
    if spec.standalone:
        # A standalone mongod takes writes from its first connection: with nobody to catch up
        # from or to ask for votes, stand before listening (else its first clients would meet
        # NotPrimary errors, which no standalone gives).
        sync.maybe_finish_recovering(node, no_source=True)
        if node.is_electable():
            await election.run_election(node, reason="standalone", skip_dry_run=True)
    commands = Commands(node)
    name, port = host.rsplit(":", 1)
    tls = (
        member_server_context(sandbox_dir, require_client_certificate=spec.x509)
        if spec.tls
        else None
    )
    server = await Server(commands).serve(name, int(port), tls)
    node.events.emit("listening", port=int(port), state=node.state.name)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, lambda: loop.create_task(node.shutdown()))
    tasks = [
        journal.journal_loop(node),
        heartbeat.liveness_loop(node),
        election.election_timer_loop(node),
        sync.fetcher_loop(node),
        keep_cursors_bounded(commands),
        commands.coordinators.resume_loop(),
        diagnostics.capture_loop(node),
        heartbeat.heartbeat_all(node),
    ]
    async with server:
        try:
            await asyncio.gather(*tasks)
        except StorageReadError as exc:  # in a background loop: nothing to answer, so fatal
            node.fatal(str(exc))


def _name_process(name: str) -> None:
    """A member started as `python` says what it is in its short name (`top`, `ps -o comm`,
    process accounting); one started under another name (as `mongod`, standing in for one)
    keeps it. The command line names its directory and port either way."""
    comm = Path("/proc/self/comm")
    with suppress(OSError):  # not Linux, or no /proc: cosmetic
        if comm.read_text().startswith("python"):
            comm.write_text(name)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m rsdrill_emulator")
    parser.add_argument("--dir", required=True, type=Path, help="the sandbox directory")
    parser.add_argument("--host", required=True, help="this member's host:port")
    parser.add_argument("--init", action="store_true", help="first boot of a new set")
    parser.add_argument("--router", action="store_true", help="a router of the cluster in --dir")
    args = parser.parse_args(argv)
    _name_process("rsdrill-router" if args.router else "rsdrill-member")
    _tune_collector()
    try:
        # libuv's loop, not asyncio's own: the loop and stream work of each message a member
        # answers costs about 60 us of CPU on asyncio's Python loop and 25 on uvloop (a
        # loopback round trip measured here), which saves a member 12-20 % of its CPU, at
        # rest and under writes.
        if args.router:
            from rsdrill_emulator.router import run_router

            uvloop.run(run_router(args.dir, args.host))
        else:
            uvloop.run(run_member(args.dir, args.host, args.init))
    except (OSError, sqlite3.Error, StorageReadError) as exc:  # e.g. its volume is unreadable
        print(f"member {args.host}: {exc}", file=sys.stderr)
        sys.exit(1)


def _tune_collector() -> None:
    """What the imports made lives as long as the process: frozen, the collector's passes
    skip it. A young-generation pass per 10,000 allocations, not 700: a write allocates
    hundreds of short-lived objects, and every pass runs in the thread that answers all
    messages. Two sets side by side, cells alternating: j:true inserts x8 +5 % (standalone),
    +7 % (rs3, w:majority), 6 % less CPU per write."""
    gc.freeze()
    gc.set_threshold(10_000, 20, 100)


if __name__ == "__main__":
    main()
