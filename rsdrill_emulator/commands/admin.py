"""Server information, sessions, shutdown, fail points and the clock-skew hook."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any, TypeGuard

from bson.int64 import Int64

from rsdrill_emulator import (
    participant,
    wallclock,
)
from rsdrill_emulator.commands.base import (
    _GENERIC_FIELDS,
    GIT_VERSION,
    Request,
    _admin_only,
    claimed,
    storage_engine,
)
from rsdrill_emulator.commands.dispatcher import command
from rsdrill_emulator.commands.handshake import hello_reply
from rsdrill_emulator.coordinator import HANG_POINTS
from rsdrill_emulator.errors import (
    CommandError,
)
from rsdrill_emulator.failpoint import (
    STOP_REPLICATION,
    FailPoint,
)
from rsdrill_emulator.node import MemberState, Node

if TYPE_CHECKING:
    from rsdrill_emulator.commands.dispatcher import Commands


@command("ping")
async def _ping(cmds: Commands, req: Request) -> dict[str, Any]:
    return {}


@command("buildInfo", "buildinfo")
async def _build_info(cmds: Commands, req: Request) -> dict[str, Any]:
    version = claimed(cmds.node.spec)
    return {
        "version": version.version,
        "gitVersion": GIT_VERSION,
        "versionArray": list(version.array),
        "bits": 64,
        "maxBsonObjectSize": 16 * 1024 * 1024,
        "storageEngines": [storage_engine(cmds.node.spec)],
    }


def _parameters(node: Node) -> dict[str, Any]:
    """The server parameters the emulator has (getParameter's answer to "*")."""
    version = claimed(node.spec).version.rsplit(".", 1)[0]
    return {
        "enableTestCommands": True,  # configureFailPoint is there, as test suites expect
        "featureCompatibilityVersion": {"version": version},
        "logicalSessionTimeoutMinutes": 30,
        "transactionLifetimeLimitSeconds": 60,
        "requireApiVersion": False,
    }


# Fields a driver may add to any command, beside the command's own.


@command("getParameter")
async def _get_parameter(cmds: Commands, req: Request) -> dict[str, Any]:
    _admin_only(req)
    known = _parameters(cmds.node)
    if req.body.get("getParameter") == "*":
        return dict(known)
    asked = [k for k in req.body if k != "getParameter" and k not in _GENERIC_FIELDS]
    missing = [k for k in asked if k not in known]
    if missing or not asked:
        raise CommandError(72, "no option found to get")
    return {k: known[k] for k in asked}


@command("getCmdLineOpts")
async def _get_cmd_line_opts(cmds: Commands, req: Request) -> dict[str, Any]:
    _admin_only(req)
    node = cmds.node
    name, port = node.host.rsplit(":", 1)
    parsed: dict[str, Any] = {
        "net": {"bindIp": name, "port": int(port)},
        "setParameter": {"enableTestCommands": "1"},
        "security": {"authorization": "enabled" if node.requires_login else "disabled"},
    }
    argv = ["mongod", "--bind_ip", name, "--port", port]
    if not node.spec.standalone:
        parsed["replication"] = {"replSet": node.spec.set_name}
        argv += ["--replSet", node.spec.set_name]
    return {"argv": argv, "parsed": parsed}


@command("endSessions", "killSessions", "refreshSessions", "killAllSessions")
async def _sessions(cmds: Commands, req: Request) -> dict[str, Any]:
    """Sessions live on the client; ending or killing them aborts their transactions."""
    name = req.name.lower()
    if name == "killallsessions":
        cmds.transactions.end_sessions(None)
    elif name != "refreshsessions":
        cmds.transactions.end_sessions(list(req.body.get(req.name) or []))
    return {}


@command("commitTransaction")
async def _commit_transaction(cmds: Commands, req: Request) -> dict[str, Any]:
    prepared = cmds.node.prepared.find(req.body["lsid"], int(req.body["txnNumber"]))
    if prepared is not None:
        return await participant.commit(cmds, cmds.transactions, req, prepared)
    return await cmds.transactions.commit(cmds, req)


@command("prepareTransaction")
async def _prepare_transaction(cmds: Commands, req: Request) -> dict[str, Any]:
    return await participant.prepare(cmds, cmds.transactions, req)


@command("coordinateCommitTransaction")
async def _coordinate_commit(cmds: Commands, req: Request) -> dict[str, Any]:
    """A router hands this shard a transaction's commit. With participants: a two-phase
    commit coordinated here (or the one under way joined). Without (a router that did not run
    the transaction), or once this shard's own part has ended (a retry after the end): the
    decision, from the coordinator under way or this member's own participant."""
    lsid, number = req.body["lsid"], int(req.body["txnNumber"])
    participants = [str(p["shardId"]) for p in req.body.get("participants") or []]
    if cmds.transactions.ended(cmds.node, lsid, number):
        participants = []
    outcome = await cmds.coordinators.coordinate(lsid, number, participants)
    if outcome is not None:
        return outcome
    return await cmds.transactions.recover_decision(cmds, req)


@command("abortTransaction")
async def _abort_transaction(cmds: Commands, req: Request) -> dict[str, Any]:
    prepared = cmds.node.prepared.find(req.body["lsid"], int(req.body["txnNumber"]))
    if prepared is not None:
        return await participant.abort(cmds, cmds.transactions, req, prepared)
    return await cmds.transactions.abort(cmds, req)


@command("serverStatus")
async def _server_status(cmds: Commands, req: Request) -> dict[str, Any]:
    node = cmds.node
    status = {
        "host": node.host,
        "version": claimed(node.spec).version,
        "process": "mongod",
        "pid": Int64(os.getpid()),
        "uptime": float(node.uptime_s()),
        "uptimeMillis": Int64(int((time.monotonic() - node.started_mono) * 1000)),
        "localTime": wallclock.now(),
        "connections": {"current": cmds.connections, "available": 50_000},
        "opcounters": {k: Int64(v) for k, v in cmds.opcounters.items()},
        "storageEngine": {
            "name": storage_engine(node.spec),
            "persistent": node.spec.storage != "memory",
        },
    }
    if not node.spec.standalone:
        repl = hello_reply(node, Request(req.db, "hello", {}, True, req.connection_id))
        status["repl"] = {**repl, "rbid": node.rbid}  # what monitoring alerts on rollbacks read
    return status


@command("shutdown")
async def _shutdown(cmds: Commands, req: Request) -> dict[str, Any]:
    if req.db != "admin":
        raise CommandError(13, "shutdown may only be run against the admin database")
    node = cmds.node
    if node.state is MemberState.PRIMARY and not req.body.get("force"):
        node.step_down(reason="shutdown", freeze_s=0)
    await node.shutdown()
    return {}


@command("configureFailPoint")
async def _configure_fail_point(cmds: Commands, req: Request) -> dict[str, Any]:
    _admin_only(req)
    name = str(req.body.get("configureFailPoint"))
    if name in HANG_POINTS:
        hanging = cmds.coordinators.hang_points
        hanging.discard(name) if req.body.get("mode") == "off" else hanging.add(name)
        return {"count": cmds.coordinators.hang_entries.get(name, 0)}
    fail_point = FailPoint.from_command(req.body)
    if fail_point is None:
        cmds.fail_points.pop(name, None)
    else:
        cmds.fail_points[name] = fail_point
    if name == STOP_REPLICATION:
        cmds.node.replication_stopped = fail_point is not None
    return {"count": 0}


@command("rsdrillClockSkew")
async def _clock_skew(cmds: Commands, req: Request) -> dict[str, Any]:
    """rsdrill's clock-skew fault: this member's wall clock moved (see wallclock.py)."""
    _admin_only(req)
    offset, drift = req.body.get("rsdrillClockSkew"), req.body.get("drift", 0)
    if not (_number(offset) and _number(drift)):
        raise CommandError(2, "rsdrillClockSkew takes the offset in seconds and a numeric drift")
    wallclock.set_skew(float(offset), float(drift))
    cmds.node.events.emit("clock_skew", offset_s=float(offset), drift=float(drift))
    return {"skewSeconds": wallclock.skew_s()}


def _number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)
