"""`rsdrill sandbox ...`: run a local replica set, break its members, and a scripted failover demo.

The launcher and pymongo are imported inside each command so that `rsdrill --help` stays fast.
"""

import itertools
import json
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from rsdrill.cli.errors import JsonOption, exit_invalid, json_errors, ready_out_dir, sandbox_errors
from rsdrill.sandbox.config import MemberSpec, ReplSetSpec, Settings, build_topology

if TYPE_CHECKING:
    from pymongo.collection import Collection

    from rsdrill.sandbox.cluster import MemberStatus, Sandbox

app = typer.Typer(
    help="Local replica sets of real member processes (the built-in emulator, or mongod).",
    no_args_is_help=True,
    rich_markup_mode=None,  # as the root app: no Rich import for help
)

DEFAULT_DIR = Path(".rsdrill/sandbox")
DEFAULT_PORT_BASE = 28017


class Topology(StrEnum):
    rs1 = "rs1"
    rs3 = "rs3"
    psa = "psa"
    standalone = "standalone"
    sharded = "sharded"


class ReplSetTopology(StrEnum):
    """The topologies with a primary to kill (the demo's)."""

    rs1 = "rs1"
    rs3 = "rs3"
    psa = "psa"


class Storage(StrEnum):
    disk = "disk"
    memory = "memory"


class Handshake(StrEnum):
    hello = "hello"
    legacy = "legacy"


class EngineName(StrEnum):
    auto = "auto"
    emulator = "emulator"
    mongod = "mongod"


DirOption = Annotated[
    Path, typer.Option("--dir", help="Sandbox directory.", file_okay=False, show_default=True)
]
PortBaseOption = Annotated[
    int, typer.Option(min=1, max=65535, help="Port of the first member; the others follow it.")
]
ElectionTimeoutOption = Annotated[
    int | None,
    typer.Option(min=1, help="electionTimeoutMillis (MongoDB's default: 10000)."),
]
EngineOption = Annotated[
    EngineName,
    typer.Option(help="auto: a real mongod when one is on PATH, else the built-in emulator."),
]
MemberArgument = Annotated[
    str, typer.Argument(help="host:port, a port, or primary / secondary / arbiter.")
]


def _settings(
    election_timeout: int | None,
    heartbeat_interval: int | None,
    heartbeat_timeout: int | None = None,
    catch_up_timeout: int | None = None,
) -> Settings:
    """Settings with MongoDB's defaults except where an option was given."""
    given: dict[str, Any] = {
        "election_timeout_ms": election_timeout,
        "heartbeat_interval_ms": heartbeat_interval,
        "heartbeat_timeout_s": heartbeat_timeout,
        "catch_up_timeout_ms": catch_up_timeout,
    }
    return Settings(**{k: v for k, v in given.items() if v is not None})


def _echo_members(statuses: "list[MemberStatus]") -> None:
    for s in statuses:
        pid = str(s.pid) if s.pid is not None else "-"
        typer.echo(f"  {s.name:<21} pid {pid:>7}  {s.state}")


@app.command()
@json_errors
def up(
    topology: Annotated[
        Topology,
        typer.Option(
            help="rs1: one member; rs3: three; psa: primary-secondary-arbiter; standalone: "
            "one server without a replica set; sharded: routers, a config server set and "
            "shards (--shards, --shard-topology, --mongos)."
        ),
    ] = Topology.rs3,
    shards: Annotated[int, typer.Option(min=1, help="sharded: how many shards (default: 2).")] = 2,
    shard_topology: Annotated[
        ReplSetTopology, typer.Option(help="sharded: each shard's replica set (default: rs3).")
    ] = ReplSetTopology.rs3,
    mongos: Annotated[int, typer.Option(min=1, help="sharded: how many routers (default: 2).")] = 2,
    balancer: Annotated[
        bool, typer.Option(help="sharded: the balancer moves chunks (default: on, as MongoDB's).")
    ] = True,
    directory: DirOption = DEFAULT_DIR,
    port_base: PortBaseOption = DEFAULT_PORT_BASE,
    election_timeout: ElectionTimeoutOption = None,
    heartbeat_interval: Annotated[
        int | None,
        typer.Option(min=1, help="heartbeatIntervalMillis (MongoDB's default: 2000)."),
    ] = None,
    heartbeat_timeout: Annotated[
        int | None,
        typer.Option(min=1, help="heartbeatTimeoutSecs: silence before DOWN (default: 10)."),
    ] = None,
    catch_up_timeout: Annotated[
        int | None,
        typer.Option(
            min=-1, help="catchUpTimeoutMillis of a new primary (default: -1, unlimited)."
        ),
    ] = None,
    oplog_size_mb: Annotated[
        int | None, typer.Option(min=1, help="Oplog size of each member in MB (default: 192).")
    ] = None,
    initial_sync_mb_per_s: Annotated[
        float | None,
        typer.Option(min=0.001, help="Cap initial sync at this rate to emulate a slower network."),
    ] = None,
    cache_mb: Annotated[
        int | None,
        typer.Option(
            min=1, help="Each member's page cache in MB, its working set in memory (default: 64)."
        ),
    ] = None,
    engine: EngineOption = EngineName.auto,
    storage: Annotated[
        Storage,
        typer.Option(
            help="memory: data lives only in the process and a restart loses it (as mongod's "
            "inMemory engine); standalone only."
        ),
    ] = Storage.disk,
    handshake: Annotated[
        Handshake,
        typer.Option(
            help="legacy: members answer only isMaster, not hello, and claim version 4.4.1 "
            "(as servers before 4.4.2 and some compatible servers)."
        ),
    ] = Handshake.hello,
    auth: Annotated[
        bool,
        typer.Option(
            "--auth",
            help="Require a login (SCRAM), as production sets do: a user with a random "
            "password, kept in DIR/auth.json (never printed). Emulator engine.",
        ),
    ] = False,
    user: Annotated[
        list[str] | None,
        typer.Option(
            "--user",
            metavar="NAME=ROLE[,ROLE...]",
            help="With --auth, also a user with these built-in roles (role or role@db, e.g. "
            "clusterMonitor,readWrite@app) and a random password in DIR/auth.json; repeatable.",
        ),
    ] = None,
    aws_user: Annotated[
        list[str] | None,
        typer.Option(
            "--aws-user",
            metavar="ARN=ROLE[,ROLE...]",
            help="With --auth, an IAM user or role (its ARN; an assumed role as "
            "arn:aws:sts::ACCOUNT:assumed-role/NAME/*) that logs in with MONGODB-AWS on "
            "$external, with these built-in roles; repeatable. Needs --aws-sts-url.",
        ),
    ] = None,
    aws_sts_url: Annotated[
        str | None,
        typer.Option(
            "--aws-sts-url",
            metavar="URL",
            help="The STS endpoint members send a MONGODB-AWS client's signed "
            "GetCallerIdentity request to (as mongod sends it to AWS STS), e.g. a moto_server "
            "on loopback.",
        ),
    ] = None,
    tls: Annotated[
        bool,
        typer.Option(
            "--tls",
            help="Members accept TLS only, with certificates from a throw-away CA under DIR/tls "
            "(ca.pem, server.pem, client.pem). Emulator engine.",
        ),
    ] = False,
    x509: Annotated[
        bool,
        typer.Option(
            "--x509",
            help="Require a login by client certificate (MONGODB-X509, DIR/tls/client.pem); "
            "members authenticate to each other with theirs. Needs --tls.",
        ),
    ] = False,
    zones: Annotated[
        str | None,
        typer.Option(
            "--zones",
            metavar="A,B,C",
            help="The members' failure domains, round-robin in member order (a,b,c: one per "
            "zone; a,a,b: two data centres, 2+1), as each member's replica-set tag `zone`.",
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Start a replica set and return once it has a writable primary; print its URI."""
    from rsdrill.redact import redact_uri
    from rsdrill.sandbox import cluster

    if auth and x509:
        exit_invalid("rsdrill: choose one login: --auth (SCRAM) or --x509 (certificates)")
    ready_out_dir(directory, "--dir")
    settings = _settings(election_timeout, heartbeat_interval, heartbeat_timeout, catch_up_timeout)
    if topology is Topology.sharded:
        given = {
            "--auth": auth,
            "--tls": tls,
            "--user": user,
            "--aws-user": aws_user,
            "--storage": storage is not Storage.disk,
            "--engine": engine.value == "mongod",
            "--handshake": handshake is not Handshake.hello,
        }
        if zones is not None:
            exit_invalid("rsdrill: --zones: a sharded sandbox does not place its members in "
                         "zones yet")  # fmt: skip
        if refused := [option for option, on in given.items() if on]:
            exit_invalid(
                f"rsdrill: {', '.join(refused)}: not for a sharded sandbox yet (its routers "
                "take no login or TLS, and run on the emulator)"
            )
        from rsdrill.cli.sharded import up_sharded_command

        up_sharded_command(
            directory, port_base, settings, (shards, shard_topology.value, mongos, balancer),
            as_json,
        )  # fmt: skip
        return
    users = _users(user or [])
    aws_users = _users(aws_user or [], option="--aws-user")
    options: dict[str, Any] = {"storage": storage.value, "handshake": handshake.value,
                               "tls": tls, "x509": x509, "aws_sts_url": aws_sts_url}  # fmt: skip
    if oplog_size_mb is not None:
        options["oplog_size_bytes"] = oplog_size_mb * 1024 * 1024
    if initial_sync_mb_per_s is not None:
        options["initial_sync_bytes_per_s"] = int(initial_sync_mb_per_s * 1024 * 1024)
    if cache_mb is not None:
        options["cache_bytes"] = cache_mb * 1024 * 1024
    if zones is not None:
        options["zones"] = [z.strip() for z in zones.split(",")]
    try:
        spec = build_topology(
            topology.value,
            port_base=port_base,
            settings=settings,
            **options,
        )
    except ValueError as exc:
        exit_invalid(f"rsdrill: {exc}")
    with sandbox_errors():
        chosen, why = cluster.choose_engine(engine.value)
        started = time.monotonic()
        sandbox = cluster.up(directory, spec, chosen, auth=auth, users=users, aws_users=aws_users)
        took = time.monotonic() - started
        statuses = sandbox.status()
    if as_json:
        report = {
            "dir": str(sandbox.directory),
            "engine": chosen.name,
            "engine_reason": why,
            "topology": spec.topology,
            "set_name": spec.set_name,
            "uri": redact_uri(sandbox.uri),
            "startup_s": round(took, 3),
            "members": [s.to_dict() for s in statuses],
        }
        typer.echo(json.dumps(report, indent=2))
        return
    typer.echo(f"engine: {chosen.name} ({why})")
    typer.echo(f"sandbox: {sandbox.directory} ({spec.topology}, writable in {took:.2f} s)")
    typer.echo(f"uri: {redact_uri(sandbox.uri)}")
    if auth:
        typer.echo(f"password: in {sandbox.directory / 'auth.json'} (readable by you only)")
    _echo_members(statuses)


def _users(given: list[str], option: str = "--user") -> dict[str, list[str]]:
    """`--user NAME=ROLE,ROLE` options as name → roles; exit 2 on a malformed one."""
    from rsdrill.privileges import role_privileges
    from rsdrill.sandbox.auth import parse_role

    users: dict[str, list[str]] = {}
    for item in given:
        name, sep, roles = item.partition("=")
        if not sep or not name or not roles:
            exit_invalid(f"rsdrill: {option} {item}: write NAME=ROLE[,ROLE...]")
        for role in roles.split(","):
            try:
                role_privileges(*parse_role(role))
            except ValueError as exc:
                exit_invalid(f"rsdrill: {option} {item}: {exc}")
        users[name] = roles.split(",")
    return users


@app.command()
@json_errors
def status(directory: DirOption = DEFAULT_DIR, as_json: JsonOption = False) -> None:
    """List the members with their pid and state (DOWN: not running; STOPPED: SIGSTOPped);
    a sharded sandbox's routers and each of its replica sets."""
    from rsdrill.redact import redact_uri
    from rsdrill.sandbox.cluster import Sandbox
    from rsdrill.sandbox.config import CLUSTER_FILE

    if (directory / CLUSTER_FILE).exists():
        from rsdrill.cli.sharded import status_sharded_command

        status_sharded_command(directory, as_json)
        return
    sandbox = Sandbox(directory)
    with sandbox_errors():
        statuses = sandbox.status()
    if as_json:
        report = {
            "dir": str(sandbox.directory),
            "engine": sandbox.engine.name,
            "topology": sandbox.spec.topology,
            "uri": redact_uri(sandbox.uri),
            "members": [s.to_dict() for s in statuses],
        }
        typer.echo(json.dumps(report, indent=2))
        return
    typer.echo(f"sandbox: {sandbox.directory} ({sandbox.spec.topology}, {sandbox.engine.name})")
    typer.echo(f"uri: {redact_uri(sandbox.uri)}")
    _echo_members(statuses)


@app.command()
def down(directory: DirOption = DEFAULT_DIR) -> None:
    """Stop every member process of the sandbox (and a sharded one's routers) and check that
    none is left running."""
    from rsdrill.sandbox.cluster import Sandbox
    from rsdrill.sandbox.config import CLUSTER_FILE
    from rsdrill.sandbox.sharded import ShardedSandbox

    sandbox = (
        ShardedSandbox(directory) if (directory / CLUSTER_FILE).exists() else Sandbox(directory)
    )
    with sandbox_errors():
        pids = sandbox.down()
    if pids:
        listed = ", ".join(str(p) for p in pids)
        typer.echo(f"stopped {_processes(pids)} (pids {listed}); none left running")
    else:
        typer.echo(f"no member process was running in {sandbox.directory}")


def _processes(pids: list[int]) -> str:
    return f"{len(pids)} member process" + ("" if len(pids) == 1 else "es")


def _act_on_member(directory: Path, ref: str, action: "Callable[[Sandbox, Any], str]") -> None:
    from rsdrill.sandbox.cluster import Sandbox
    from rsdrill.sandbox.config import CLUSTER_FILE

    with sandbox_errors():
        sharded = (directory / CLUSTER_FILE).exists()
        sandbox = _set_holding(directory, ref) if sharded else Sandbox(directory)
        member = sandbox.resolve(ref)
        typer.echo(action(sandbox, member))


def _set_holding(directory: Path, ref: str) -> "Sandbox":
    """The replica set of a sharded sandbox that has the member `ref` (host:port or port). Its
    directory was refused as "no sandbox in DIR: start one with `rsdrill sandbox up`"."""
    from rsdrill.sandbox.errors import SandboxError
    from rsdrill.sandbox.sharded import ShardedSandbox

    sets = ShardedSandbox(directory).sets
    for found in sets.values():
        if any(ref in (m.host, str(m.port)) for m in found.spec.members):
            return found
    listed = "; ".join(f"{name}: {', '.join(m.host for m in s.spec.members)}"
                       for name, s in sets.items())  # fmt: skip
    if ref.strip().lower() in ("primary", "secondary", "arbiter"):
        raise SandboxError(
            f"every set of a sharded sandbox has its {ref.strip().lower()}: name the member by "
            f"host:port or port, or give its set's directory (--dir {directory}/SET) ({listed})"
        )
    raise SandboxError(f"{ref!r} is no member of the sharded sandbox's replica sets ({listed})")


@app.command()
def kill(member: MemberArgument, directory: DirOption = DEFAULT_DIR) -> None:
    """SIGKILL a member (a host that dies)."""
    _act_on_member(
        directory, member, lambda sb, m: f"killed {m.host} (pid {sb.kill(m)}) with SIGKILL"
    )


@app.command()
def stop(member: MemberArgument, directory: DirOption = DEFAULT_DIR) -> None:
    """SIGSTOP a member (a host that freezes)."""
    _act_on_member(
        directory, member, lambda sb, m: f"stopped {m.host} (pid {sb.stop(m)}) with SIGSTOP"
    )


@app.command()
def cont(member: MemberArgument, directory: DirOption = DEFAULT_DIR) -> None:
    """SIGCONT a stopped member (a frozen member has no role: name it by host:port or port)."""
    _act_on_member(directory, member, _resume)


def _resume(sandbox: "Sandbox", member: MemberSpec) -> str:
    """SIGCONT `member`, refused unless it is stopped: a role names a running member, so `cont
    secondary` would signal a running one, say it was resumed and leave the frozen one frozen."""
    from rsdrill.sandbox.errors import SandboxError

    states = {s.name: s.state for s in sandbox.status()}
    state = states.get(member.host, "DOWN")
    if state not in ("STOPPED", "DOWN"):  # DOWN: cont itself says it is not running
        stopped = [name for name, s in states.items() if s == "STOPPED"]
        raise SandboxError(
            f"{member.host} is not stopped ({state}): nothing to resume; "
            + (f"stopped: {', '.join(stopped)}" if stopped else "no member is stopped")
        )
    return f"resumed {member.host} (pid {sandbox.cont(member)}) with SIGCONT"


@app.command()
def start(
    member: MemberArgument,
    directory: DirOption = DEFAULT_DIR,
    wipe: Annotated[
        bool, typer.Option("--wipe", help="Empty its data directory first: a full initial sync.")
    ] = False,
) -> None:
    """Restart a member that is not running, on its kept data directory unless --wipe."""
    how = "on an empty data directory (initial sync)" if wipe else "on its kept data directory"
    _act_on_member(
        directory, member, lambda sb, m: f"started {m.host} (pid {sb.start(m, wipe=wipe)}) {how}"
    )


@app.command()
def backup(
    to: Annotated[Path, typer.Option("--to", help="Directory the backup is written to.")],
    directory: DirOption = DEFAULT_DIR,
) -> None:
    """Physical backup of the running set (one consistent copy of a secondary's data)."""
    from rsdrill.sandbox.backup import take_backup
    from rsdrill.sandbox.cluster import Sandbox

    ready_out_dir(to, "--to")
    with sandbox_errors():
        done = take_backup(Sandbox(directory), to)
    typer.echo(f"backed up {done.source} to {done.path} at {done.taken_at}")


@app.command()
def restore(
    source: Annotated[Path, typer.Option("--from", help="Directory of a `backup`.")],
    directory: DirOption = DEFAULT_DIR,
) -> None:
    """Restore a backup onto every member (all stopped) and start them: the set comes back
    with the backup's data."""
    from rsdrill.sandbox.backup import restore_backup
    from rsdrill.sandbox.cluster import Sandbox

    with sandbox_errors():
        started = restore_backup(Sandbox(directory), source)
    typer.echo(f"restored {source} onto {', '.join(started)}")


@app.command()
def demo(
    topology: Annotated[
        ReplSetTopology, typer.Option(help="rs1: one member; rs3: three; psa: with an arbiter.")
    ] = ReplSetTopology.rs3,
    election_timeout: ElectionTimeoutOption = None,
    directory: Annotated[
        Path | None,
        typer.Option(
            "--dir", file_okay=False, help="Sandbox directory (default: a temporary one)."
        ),
    ] = None,
    port_base: PortBaseOption = DEFAULT_PORT_BASE,
    engine: EngineOption = EngineName.auto,
) -> None:
    """Bring a sandbox up, kill its primary under a w:majority write loop, measure, tear down."""
    from rsdrill.sandbox import cluster

    # SIGTERM must tear the sandbox down as Ctrl-C does, not leave its members running.
    signal.signal(signal.SIGTERM, _exit_on_signal)
    if directory is not None:
        ready_out_dir(directory, "--dir")
    spec = build_topology(
        topology.value, port_base=port_base, settings=_settings(election_timeout, None)
    )
    with sandbox_errors(), _demo_directory(directory) as where:
        chosen, why = cluster.choose_engine(engine.value)
        typer.echo(
            f"{spec.topology}, electionTimeoutMillis {spec.settings.election_timeout_ms}, "
            f"engine {chosen.name} ({why})"
        )
        started = time.monotonic()
        sandbox = cluster.up(where, spec, chosen)
        try:
            typer.echo(f"sandbox writable in {time.monotonic() - started:.2f} s: {sandbox.uri}")
            _echo_members(sandbox.status())
            _failover_script(sandbox)
        finally:
            pids = sandbox.down()
            typer.echo(f"sandbox torn down: {_processes(pids)} stopped, none left running")


def _exit_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


@contextmanager
def _demo_directory(directory: Path | None) -> Iterator[Path]:
    if directory is not None:
        yield directory
        return
    with tempfile.TemporaryDirectory(prefix="rsdrill-demo-") as tmp:
        yield Path(tmp)


class _WriteLoop:
    """Inserts a document every `interval_s` on a thread and records every attempt."""

    def __init__(self, collection: "Collection[Any]", interval_s: float) -> None:
        self._collection = collection
        self._interval_s = interval_s
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="demo-writes", daemon=True)
        # (started, ended, acknowledged), monotonic seconds; appended by the writer thread only.
        self.attempts: list[tuple[float, float, bool]] = []

    def __enter__(self) -> "_WriteLoop":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        self._thread.join()

    def _run(self) -> None:
        from pymongo.errors import PyMongoError

        n = 0
        while not self._stopping.is_set():
            began = time.monotonic()
            try:
                self._collection.insert_one({"n": n})
                ok = True
            except PyMongoError:
                ok = False
            self.attempts.append((began, time.monotonic(), ok))
            n += 1
            self._stopping.wait(max(0.0, self._interval_s - (time.monotonic() - began)))

    def acknowledged_after(self, t: float) -> float | None:
        """When the first write begun after `t` was acknowledged."""
        return next((end for began, end, ok in list(self.attempts) if ok and began >= t), None)

    def wait_acknowledged_after(self, t: float, timeout_s: float) -> float | None:
        deadline = time.monotonic() + timeout_s
        while (acked := self.acknowledged_after(t)) is None and time.monotonic() < deadline:
            time.sleep(0.02)
        return acked

    def longest_gap(self) -> float:
        """Longest time between two consecutive acknowledged writes."""
        acked = [end for _, end, ok in list(self.attempts) if ok]
        return max((b - a for a, b in itertools.pairwise(acked)), default=0.0)


def _wait_for_state(
    sandbox: "Sandbox", state: str, deadline: float, *, host: str | None = None
) -> str | None:
    """The first member (or `host`) seen in `state` before `deadline`, else None."""
    while time.monotonic() < deadline:
        for s in sandbox.status():
            if s.state == state and host in (None, s.name):
                return s.name
        time.sleep(0.1)
    return None


def _failover_script(sandbox: "Sandbox") -> None:
    from pymongo import MongoClient

    spec: ReplSetSpec = sandbox.spec
    election_s = spec.settings.election_timeout_ms / 1000
    failover_budget_s = 3 * election_s + 10
    client: MongoClient[Any] = MongoClient(
        sandbox.uri,
        w="majority",
        wTimeoutMS=1000,
        retryWrites=False,
        serverSelectionTimeoutMS=250,
        connectTimeoutMS=250,
        socketTimeoutMS=1500,
    )
    t0 = time.monotonic()

    def say(text: str) -> None:
        typer.echo(f"t={time.monotonic() - t0:6.2f} s  {text}")

    with client, _WriteLoop(client.rsdrill_demo.writes, interval_s=0.02) as writes:
        say("writing {w: majority} every 20 ms (250 ms timeouts, retries off)")
        time.sleep(1.0)
        victim = sandbox.resolve("primary")
        pid = sandbox.kill(victim)
        killed = time.monotonic()
        say(f"SIGKILL primary {victim.host} (pid {pid})")
        if len(spec.data_bearing) > 1:
            elected = _wait_for_state(sandbox, "PRIMARY", killed + failover_budget_s)
            if elected is None:
                say(f"no new primary within {failover_budget_s:.0f} s")
            else:
                say(f"{elected} is PRIMARY, {time.monotonic() - killed:.2f} s after the kill")
            if writes.wait_acknowledged_after(killed, timeout_s=max(3.0, election_s)):
                say(f"w:majority writes acknowledged again, by {_host(client.primary)}")
            else:
                say(
                    f"w:majority writes still fail: with {victim.host} down, too few "
                    "data-bearing members are left to make a majority"
                )
        else:
            time.sleep(1.0)  # a moment offline, as when an HA supervisor restarts the host
        say(f"restarting {victim.host} on its kept data directory")
        restarted = time.monotonic()
        sandbox.start(victim)
        back = "SECONDARY" if len(spec.data_bearing) > 1 else "PRIMARY"
        if _wait_for_state(sandbox, back, restarted + failover_budget_s + 30, host=victim.host):
            say(
                f"{victim.host} is {back} again, {time.monotonic() - restarted:.2f} s after restart"
            )
        else:
            say(f"{victim.host} did not become {back} in time")
        writes.wait_acknowledged_after(restarted, timeout_s=failover_budget_s)
    acknowledged = sum(ok for _, _, ok in writes.attempts)
    failed = len(writes.attempts) - acknowledged
    typer.echo(
        f"writes unavailable for {writes.longest_gap():.2f} s (longest time between two "
        f"acknowledged writes); {acknowledged} acknowledged, {failed} failed"
    )
    _echo_members(sandbox.status())


def _host(address: tuple[str, int] | None) -> str:
    return f"{address[0]}:{address[1]}" if address else "an unknown member"
