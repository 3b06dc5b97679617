"""`rsdrill sandbox up|status --topology sharded`: a sharded cluster of emulator processes."""

import json
import time
from pathlib import Path

import typer

from rsdrill.cli.errors import sandbox_errors
from rsdrill.sandbox.config import Settings


def up_sharded_command(
    directory: Path,
    port_base: int,
    settings: Settings,
    shape: tuple[int, str, int, bool],
    as_json: bool,
) -> None:
    """A sharded cluster of emulator processes; prints the routers' URI and every process."""
    from rsdrill.sandbox.sharded import up_sharded

    shards, shard_topology, mongos, balancer = shape
    with sandbox_errors():
        started = time.monotonic()
        cluster = up_sharded(
            directory,
            port_base=port_base,
            shards=shards,
            shard_topology=shard_topology,
            routers=mongos,
            settings=settings,
            balancer=balancer,
        )
        took = time.monotonic() - started
    sets = {name: [m.host for m in s.spec.members] for name, s in cluster.sets.items()}
    if as_json:
        report = {
            "dir": str(cluster.directory),
            "topology": "sharded",
            "uri": cluster.uri,
            "routers": list(cluster.spec.routers),
            "sets": sets,
            "startup_s": round(took, 3),
        }
        typer.echo(json.dumps(report, indent=2))
        return
    typer.echo(
        f"sandbox: {cluster.directory} (sharded: {shards} shards of {shard_topology}, "
        f"{mongos} routers, writable in {took:.2f} s)"
    )
    typer.echo(f"uri: {cluster.uri}")
    for name, hosts in sets.items():
        typer.echo(f"  {name:<10} {', '.join(hosts)}")
    for host in cluster.spec.routers:
        typer.echo(f"  router     {host}")


def status_sharded_command(directory: Path, as_json: bool) -> None:
    """Each router and each replica set's members with their pid and state."""
    from rsdrill.sandbox.sharded import ShardedSandbox

    with sandbox_errors():
        cluster = ShardedSandbox(directory)
        routers = cluster.router_status()
        sets = {name: s.status() for name, s in cluster.sets.items()}
    if as_json:
        report = {
            "dir": str(cluster.directory),
            "topology": "sharded",
            "uri": cluster.uri,
            "routers": [r.to_dict() for r in routers],
            "sets": {name: [m.to_dict() for m in members] for name, members in sets.items()},
        }
        typer.echo(json.dumps(report, indent=2))
        return
    typer.echo(f"sandbox: {cluster.directory} (sharded)")
    typer.echo(f"uri: {cluster.uri}")
    for router in routers:
        pid = str(router.pid) if router.pid is not None else "-"
        typer.echo(f"  router     {router.name:<21} pid {pid:>7}  {router.state}")
    for name, members in sets.items():
        for member in members:
            pid = str(member.pid) if member.pid is not None else "-"
            typer.echo(f"  {name:<10} {member.name:<21} pid {pid:>7}  {member.state}")
