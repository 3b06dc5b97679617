"""`rsdrill check`: everything a run needs, checked against the real target with nothing injected.

Each check is one line: what was checked, whether it holds, and — when it does not — exactly what
is missing (a file, a role, a command, a permission). `rsdrill run` runs the same checks first
and refuses, with exit 2, when one fails.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rsdrill import registry
from rsdrill.connection import (
    COMMAND_NOT_FOUND,
    ConnectOptions,
    DirectConnection,
    SettingsError,
    WireClientError,
    first_reply,
    handshake_form,
    parse_uri,
)
from rsdrill.deployment import Deployment, inspect, read_placements, version_problem
from rsdrill.domains import (
    Placement,
    PlatformPlace,
    majority_warning,
    placed_by_platform,
    planned,
    summary,
)
from rsdrill.experiment.catalog import way_of
from rsdrill.experiment.schema import Experiment
from rsdrill.faults import KINDS
from rsdrill.layout import CONFIG, ShardedLayout, member_count
from rsdrill.platforms.base import TargetError
from rsdrill.platforms.discovery import discover_members, found_cluster, known_routers
from rsdrill.platforms.domain_members import platform_places
from rsdrill.platforms.machine.mirror import mirrored
from rsdrill.privileges import CLUSTER, granted
from rsdrill.probes.availability import PROBE_DB

TIMEOUT_S = 5.0
BALANCER_SETTINGS = "config.settings"
BALANCER_CONTROL = (
    "balancer control (balancerStatus, balancerStop, balancerStart: guards.stop_balancer)"
)


@dataclass(frozen=True)
class Check:
    """One line of the report. `ok` None is a warning: the run goes on, measuring less."""

    name: str
    ok: bool | None
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Privilege:
    """An action on a resource (`cluster`, or `db.collection` with "" for any collection)."""

    resource: str
    action: str
    used_by: str
    role: str
    required: bool = True


def failed(checks: list[Check]) -> list[Check]:
    return [c for c in checks if c.ok is False]


def check_experiment(exp: Experiment) -> list[Check]:
    """Every check for `exp`, in order; later checks are skipped once one they need fails."""
    return list(_checks(exp))


def _checks(exp: Experiment) -> Iterator[Check]:
    yield from _local_tools(exp)
    yield from _fault_ways(exp)
    yield from _monitors(exp)
    if registry.member_source(exp.target.platform) == "built":
        yield Check("target", True, f"a {exp.target.platform} the run builds itself")
        yield from _domains(planned(exp.target.zones, member_count(exp.target.topology)))
        return
    assert exp.target.uri is not None  # the schema requires it off the sandbox
    try:
        parsed = parse_uri(exp.target.uri)
    except SettingsError as exc:
        yield Check("connection string", False, str(exc))
        return
    options = parsed.options
    yield Check("connection string", True, _describe_connection(options, parsed.seeds))
    layout: ShardedLayout | None = None
    if exp.target.topology == "sharded":
        try:
            layout = found_cluster(exp, parsed.seeds, options)
        except TargetError as exc:
            yield Check("sharded cluster", False, str(exc))
            return
        members = [*layout.routers, *layout.members()]
    else:
        found = _members(exp, parsed.seeds, options)
        if isinstance(found, Check):
            yield found
            return
        members = found
    # Every member at once: a set of silent hosts costs one timeout, not one per member.
    with ThreadPoolExecutor(max_workers=max(len(members), 1)) as pool:
        lines = list(pool.map(lambda host: _reach(host, options), members))
    yield from lines
    reached = [host for host, line in zip(members, lines, strict=True) if line.ok]
    if not reached:
        return
    # What the URI reaches is what the probes will write to (a local target lists its members
    # apart from it).
    asked = next((seed for seed in parsed.seeds if seed in reached), reached[0])
    try:
        deployment = inspect(asked, TIMEOUT_S, options=options)
    except WireClientError as exc:
        yield Check("deployment", False, str(exc))
        return
    yield from _deployment(exp, deployment)
    if layout is not None:
        yield from _cluster_tree(layout, options, stopping=exp.guards.stop_balancer)
    tagged: list[Placement] = []
    if deployment.topology == "replica set":
        yield from _status_unreadable(reached[0], options)
        tagged = read_placements(reached, TIMEOUT_S, options=options)
    yield from _slos(exp, deployment)
    yield from _privileges(exp, reached[0], options, deployment)
    if any(KINDS[f.kind].needs_test_commands for f in exp.faults):
        yield from _test_commands(reached, options)
    platform, places = _platform(exp)
    yield platform
    if deployment.topology == "replica set":
        yield from _domains(placed_by_platform(tagged, places))


def _monitors(exp: Experiment) -> Iterator[Check]:
    """Each `abort_on` source of the team's monitoring, asked once now: one that cannot parse
    its query, has no such alarm, cannot be reached (unless told to ignore that) or already
    says stop fails the check, and the run does not start."""
    from rsdrill.engine.monitors import MonitorError, Unreachable, monitor

    for i, item in enumerate(exp.abort_on):
        if isinstance(item, str):
            continue
        source = monitor(item)
        try:
            firing = source.firing()
        except Unreachable as exc:
            ignored = source.on_unreachable == "ignore"
            yield Check(f"abort_on[{i}]", None if ignored else False,
                        f"{exc}" + ("; ignored while unreachable (on_unreachable: ignore)"
                                    if ignored else ""))  # fmt: skip
            continue
        except MonitorError as exc:
            yield Check(f"abort_on[{i}]", False, str(exc))
            continue
        yield Check(f"abort_on[{i}]", not firing,
                    f"{source.name}: " + ("says stop already: the run would stop at once"
                                          if firing else "answers, quiet"))  # fmt: skip


def _describe_connection(options: ConnectOptions, seeds: list[str]) -> str:
    parts = [f"seeds {', '.join(seeds)}"]
    if options.tls is not None:
        parts.append(
            "TLS" + (" with a client certificate" if options.tls.certificate_key_file else "")
        )
    creds = options.credentials
    if creds is not None:
        chain = "the key the AWS credential chain finds"
        who = creds.user or (
            chain if creds.mechanism == "MONGODB-AWS" else "the certificate's subject"
        )
        parts.append(f"login {creds.mechanism or 'SCRAM'} as {who} on {creds.source}")
    return "; ".join(parts)


def _members(exp: Experiment, seeds: list[str], options: ConnectOptions) -> list[str] | Check:
    """The members to reach: a local target names them; elsewhere the set lists them."""
    if registry.member_source(exp.target.platform) == "listed":
        return [m.host for m in exp.target.members]
    try:
        return discover_members(seeds, TIMEOUT_S, options=options)
    except TargetError as exc:
        return Check("members", False, str(exc))


def _reach(host: str, options: ConnectOptions) -> Check:
    conn = DirectConnection(host, TIMEOUT_S, options)
    try:
        conn.hello()
    except WireClientError as exc:
        return Check(f"reach {host}", False, str(exc).removeprefix(f"{host}: "))
    finally:
        conn.close()
    how = ["answers hello" if handshake_form(host) == "hello" else "answers isMaster only"]
    if options.tls is not None:
        how.append("TLS")
    if options.credentials is not None:
        how.append("logged in")
    return Check(f"reach {host}", True, ", ".join(how))


def _deployment(exp: Experiment, deployment: Deployment) -> Iterator[Check]:
    what = f"{deployment.topology}, version {deployment.version or 'unknown'}"
    if deployment.emulator:
        what += ", rsdrill's emulator"
    problem = version_problem(deployment.version)
    if problem is not None:
        yield Check("server version", False, problem)
    else:
        yield Check("server version", True, what)
    wanted = exp.target.topology
    if deployment.topology == "sharded" and wanted == "sharded":
        yield Check("topology", True, "sharded cluster, reached through its routers (mongos)")
    elif deployment.topology == "sharded":
        yield Check("topology", False, "a mongos (sharded cluster): say `topology: sharded`, "
                    "or point target.uri at a replica set or a standalone server")  # fmt: skip
    elif deployment.topology.startswith("replica set ("):
        yield Check("topology", False, "the replica set is not initiated (rs.initiate())")
    elif not topology_fits(wanted, deployment):
        yield Check("topology", False, f"the experiment says {wanted}, the server is a "
                    f"{deployment.topology}")  # fmt: skip
    else:
        yield Check("topology", True, deployment.topology
                    + (f" {deployment.set_name}" if deployment.set_name else ""))  # fmt: skip


def _cluster_tree(
    layout: ShardedLayout, options: ConnectOptions, *, stopping: bool
) -> Iterator[Check]:
    """The cluster as the run will see it: each replica set's members with their states, the
    routers the config servers know that the URI leaves out, the balancer's state (`stopping`:
    guards.stop_balancer)."""
    from rsdrill.engine.selection import current_states

    states = current_states(layout.members(), TIMEOUT_S, options=options)
    for name, hosts in layout.sets().items():
        what = "config servers" if name == CONFIG else f"shard {name}"
        line = ", ".join(f"{h} {states[h]}" for h in hosts)
        primaries = [h for h in hosts if states[h] == "PRIMARY"]
        yield Check(what, bool(primaries) or None, line if primaries else f"{line}: no primary")
    elsewhere = [r for r in known_routers(list(layout.config), TIMEOUT_S, options=options)
                 if r not in layout.routers]  # fmt: skip
    if elsewhere:
        yield Check("routers", None, f"the config servers list routers target.uri does not "
                    f"name: {', '.join(elsewhere)} (the probes and a router fault use only the "
                    "URI's)")  # fmt: skip
    yield _balancer(layout, options, stopping=stopping)


def _balancer(layout: ShardedLayout, options: ConnectOptions, *, stopping: bool) -> Check:
    reply = first_reply(layout.routers, "admin", {"balancerStatus": 1}, TIMEOUT_S,
                        options=options)  # fmt: skip
    if reply is None:
        return Check("balancer", None, "no router answered balancerStatus")
    if not reply.get("ok"):
        return Check("balancer", None, f"balancerStatus: {reply.get('errmsg')} (its state "
                     "is not known: chunks may move during the run)")  # fmt: skip
    mode = reply.get("mode", "?")
    if stopping and mode == "full":
        moving = "on: stopped for the run by guards.stop_balancer, started again after it"
    elif stopping:
        moving = "moves no chunk: guards.stop_balancer leaves it as it is"
    else:
        moving = "on: chunks may move during the run" if mode != "off" else "off"
    return Check("balancer", True, f"{mode} ({moving})")


def _status_unreadable(host: str, options: ConnectOptions) -> Iterator[Check]:
    """A warning for a server that claims a replica set in hello but has no replSetGetStatus
    (a compatible server): the run reads its members' states from hello and measures less."""
    conn = DirectConnection(host, TIMEOUT_S, options)
    try:
        code = conn.command("admin", {"replSetGetStatus": 1}).get("code")
    except WireClientError:
        return  # reachability was checked above; the run's guards will say more
    finally:
        conn.close()
    if code == COMMAND_NOT_FOUND:
        yield Check("replica-set status", None, f"{host} has no replSetGetStatus: members' "
                    "states are read from hello; replication lag, the failover's phases and "
                    "the oplog guard cannot be measured")  # fmt: skip


def _domains(members: list[Placement]) -> Iterator[Check]:
    """The members by zone, and a warning when one zone holds the voting majority."""
    if not any(m.zone for m in members):
        return
    warning = majority_warning(members) is not None
    yield Check("failure domains", None if warning else True, summary(members))


def _test_commands(members: list[str], options: ConnectOptions) -> Iterator[Check]:
    """mongodb-fail-command needs configureFailPoint, which mongod has only with
    enableTestCommands: asked of every member (getParameter), since any may be selected."""
    refused = []
    for host in members:
        conn = DirectConnection(host, TIMEOUT_S, options)
        try:
            reply = conn.command("admin", {"getParameter": 1, "enableTestCommands": 1})
        except WireClientError as exc:
            reply = {"ok": 0, "errmsg": str(exc)}
        finally:
            conn.close()
        if not reply.get("ok") or reply.get("enableTestCommands") not in (True, 1, "1"):
            refused.append(f"{host} ({reply.get('errmsg') or 'enableTestCommands is off'})")
    if refused:
        yield Check("test commands", False, "mongodb-fail-command needs configureFailPoint: "
                    "start mongod with --setParameter enableTestCommands=1; not on "
                    + ", ".join(refused))  # fmt: skip
    else:
        yield Check("test commands", True, "configureFailPoint is available (enableTestCommands)")


def _slos(exp: Experiment, deployment: Deployment) -> Iterator[Check]:
    """An SLO on a metric this topology cannot have would fail every run: refuse it now."""
    from rsdrill.analysis.slo import not_applicable_reason

    reasons = [r for name in exp.slo if (r := not_applicable_reason(
        name, standalone=deployment.is_standalone)) is not None]  # fmt: skip
    if reasons:
        yield Check("slo", False, "; ".join(reasons))


def topology_fits(wanted: str, deployment: Deployment) -> bool:
    """A standalone server is what `standalone` and `rs1` (one data-bearing server) mean; a
    replica set fits any other topology (its shape is checked by the guards)."""
    if deployment.is_standalone:
        return wanted in ("standalone", "rs1")
    return wanted != "standalone"


def needed_privileges(exp: Experiment, standalone: bool) -> list[Privilege]:
    """What the run will ask of the server, from its probes, guards and faults."""
    needed = [
        Privilege(f"{PROBE_DB}.", action, "the probes' writes and reads", f"readWrite@{PROBE_DB}")
        for action in ("insert", "find", "update", "remove", "dropCollection")
    ]
    if not standalone:
        needed += [
            Privilege(CLUSTER, "replSetGetStatus", "the recovery probe, selection and guards",
                      "clusterMonitor"),
            Privilege(CLUSTER, "replSetGetConfig", "the quorum guard", "clusterMonitor"),
            Privilege("local.oplog.rs", "find", "the oplog-window guard (skipped without it)",
                      "clusterManager or read@local", required=False),
        ]  # fmt: skip
    if exp.target.topology == "sharded":
        needed.append(Privilege(CLUSTER, "listShards", "finding the cluster's shards from its "
                                "routers", "clusterMonitor"))  # fmt: skip
    if exp.target.topology == "sharded" and exp.guards.stop_balancer:
        # MongoDB's balancerStatus checks find, balancerStop and balancerStart update, on
        # config.settings (where the balancer's mode is kept).
        needed += [
            Privilege(BALANCER_SETTINGS, "find", BALANCER_CONTROL, "clusterMonitor"),
            Privilege(BALANCER_SETTINGS, "update", BALANCER_CONTROL, "clusterManager"),
        ]
    if exp.recovery is not None:
        needed.append(Privilege(CLUSTER, "replSetConfigure", "the recovery's forced reconfig "
                                "and the heal", "clusterManager"))  # fmt: skip
    needed.append(Privilege(CLUSTER, "serverStatus", "the result's storage engine and the "
                            "audit's rollback ids", "clusterMonitor",
                            required=False))  # fmt: skip
    if exp.audit != "off" and not standalone:
        quick = exp.audit == "quick"
        needed += [
            Privilege(f"{PROBE_DB}." if quick else ".", "dbHash",
                      "the data audit (audit: off skips it)",
                      f"read@{PROBE_DB}" if quick else "readAnyDatabase", required=False),
            Privilege(f"{PROBE_DB}." if quick else ".", "validate",
                      "the data audit (audit: off skips it)",
                      f"dbAdmin@{PROBE_DB}" if quick else "dbAdminAnyDatabase", required=False),
            Privilege(CLUSTER, "listDatabases", "the data audit (audit: off skips it)",
                      "clusterMonitor", required=False),
        ]  # fmt: skip
    kinds = {f.kind for f in exp.faults}
    needed += [Privilege(CLUSTER, action, f"the {spec.kind} fault", role)
               for spec in KINDS.values() if spec.kind in kinds
               for action, role in spec.server_privileges]  # fmt: skip
    return needed


def _privileges(
    exp: Experiment, host: str, options: ConnectOptions, deployment: Deployment
) -> Iterator[Check]:
    conn = DirectConnection(host, TIMEOUT_S, options)
    try:
        status = conn.command("admin", {"connectionStatus": 1, "showPrivileges": True})
        if not (status.get("authInfo") or {}).get("authenticatedUsers"):
            # No login: fine on a server without access control, which answers anyway.
            probe = conn.command("admin", {"listDatabases": 1, "nameOnly": True})
            if probe.get("ok"):
                yield Check("privileges", True, "the server does not require a login"
                            + _balancer_control(exp, "open to any client"))  # fmt: skip
            else:
                yield Check("privileges", False, f"the server requires a login "
                            f"({probe.get('errmsg', '')}): put a user in target.uri")  # fmt: skip
            return
    except WireClientError as exc:
        yield Check("privileges", False, str(exc))
        return
    finally:
        conn.close()
    auth = status["authInfo"]
    if "authenticatedUserPrivileges" not in auth:
        # MongoDB always lists them for showPrivileges; some compatible servers (FerretDB)
        # have no roles to list and let a logged-in user do anything.
        users = ", ".join(f"{u.get('user')}@{u.get('db')}" for u in auth["authenticatedUsers"])
        yield Check("privileges", None, f"logged in as {users}; the server does not list the "
                    "user's privileges (connectionStatus), so they are not checked")  # fmt: skip
        return
    held = auth["authenticatedUserPrivileges"] or []
    roles = ", ".join(
        f"{r.get('role')}@{r.get('db')}" for r in auth.get("authenticatedUserRoles") or []
    )
    missing = [
        p
        for p in needed_privileges(exp, deployment.is_standalone)
        if not granted(held, p.resource, p.action)
    ]
    lacking = [p for p in missing if p.required]
    if lacking:
        yield Check("privileges", False, "missing " + "; ".join(_grouped(lacking))
                    + f" (the user has {roles or 'no roles'})")  # fmt: skip
    else:
        yield Check("privileges", True, f"roles {roles}" + _balancer_control(exp, "granted"))
    for p in missing:
        if not p.required:
            detail = f"{p.action} on {p.resource} is not granted ({p.role}): {p.used_by}"
            yield Check(f"privilege {p.action}", None, detail)


def _balancer_control(exp: Experiment, how: str) -> str:
    """What the privileges line adds when the run will stop and restart the balancer."""
    if exp.target.topology != "sharded" or not exp.guards.stop_balancer:
        return ""
    return f"; {BALANCER_CONTROL}: {how}"


def _grouped(privileges: list[Privilege]) -> list[str]:
    """One phrase per resource, use and role: "insert, find on database app for ...: grant
    readWrite@app"."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    for p in privileges:
        groups.setdefault((p.resource, p.used_by, p.role), []).append(p.action)
    return [f"{', '.join(actions)} on {_resource_name(resource)} for {used_by}: grant {role}"
            for (resource, used_by, role), actions in groups.items()]  # fmt: skip


def _resource_name(resource: str) -> str:
    db, dot, collection = resource.partition(".")
    return f"database {db}" if dot and not collection else resource


def _fault_ways(exp: Experiment) -> Iterator[Check]:
    """A warning per fault that is one-way or approximated (the file opted in to both)."""
    platform = exp.target.platform
    for i, fault in enumerate(exp.faults):
        way = way_of(platform, fault)
        if way is not None and way.support != "exact":
            yield Check(f"faults[{i}] {way.support}", None, way.line(fault.kind, platform))


def _local_tools(exp: Experiment) -> Iterator[Check]:
    """What this machine needs for the faults it will inject itself (sandbox, local)."""
    if not registry.on_this_machine(exp.target.platform):
        return
    needs: dict[str, set[str]] = {}
    for fault in exp.faults:
        for tool in fault.local_tools():
            needs.setdefault(tool, set()).add(fault.kind)
    network = sorted(needs.get("nftables", ()))
    if network:
        nft = shutil.which("nft", path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin")
        if nft is None:
            yield Check("nftables", False, f"{' and '.join(network)}: the `nft` command "
                        "is missing: apt-get install nftables")  # fmt: skip
        else:
            yield Check("nftables", True, nft)
    # Mirrored members' data are on faultfs whatever the faults, served by the Python layer.
    on_copies = mirrored(exp.target)
    if "fuse" in needs or on_copies:
        yield _fuse_check(on_copies)


def _fuse_check(mirrored: bool) -> Check:
    from rsdrill.faultfs.binding import fuse_binding
    from rsdrill.faultfs.compiled import choose_layer
    from rsdrill.faultfs.mount import FaultFSError

    problems = []
    if not Path("/dev/fuse").exists():
        problems.append("/dev/fuse is missing")
    if shutil.which("fusermount3") is None and shutil.which("fusermount") is None:
        problems.append("fusermount3 is missing (apt-get install fuse3)")
    layer = "python"
    try:
        layer = choose_layer(mirrored=mirrored)
        # The compiled data path mounts through fusermount3 and needs no binding.
        if layer == "python":
            fuse_binding()
    except (ValueError, FaultFSError) as exc:
        problems.append(str(exc).removeprefix("faultfs: "))
    if problems:
        return Check("FUSE (storage faults)", False, "; ".join(problems))
    return Check("FUSE (storage faults)", True, f"/dev/fuse, fusermount3, faultfs {layer} layer")


def _platform(exp: Experiment) -> tuple[Check, dict[str, PlatformPlace]]:
    """The platform's own preflight (engines, permissions, member mapping), read-only, and
    where it places the members (an EC2 instance's zone; Kubernetes and vSphere read theirs
    when a fault selects by domain); the target reaches the members with its URI's own options
    (`RunTarget.connect_options`)."""
    from rsdrill.engine.runner import make_target
    from rsdrill.errors import GuardRefusal

    name = f"platform {exp.target.platform}"
    with tempfile.TemporaryDirectory(prefix="rsdrill-check-") as scratch:
        try:
            target = make_target(exp, Path(scratch))
        except TargetError as exc:
            return Check(name, False, str(exc)), {}
        try:
            target.setup()
            places = platform_places(target)
        except TargetError as exc:
            return Check(name, False, str(exc)), {}
        except GuardRefusal as exc:  # the run refuses it too (exit 3); the platform is fine
            return Check(name, None, str(exc)), {}
        finally:  # its sessions (vCenter, the API server) closed
            target.teardown()
    ok = "every member maps to the platform; permissions allow the faults"
    return Check(name, True, ok), places
