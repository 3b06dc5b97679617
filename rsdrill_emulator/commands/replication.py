"""The replica-set commands (status, config, stepdown, elections) and the member-to-member
ones of rsdrill's own sync (oplog fetch, initial-sync clone)."""

from __future__ import annotations

import datetime as dt
import time
from typing import TYPE_CHECKING, Any

from bson.int64 import Int64

from rsdrill_emulator import election, heartbeat, replconfig, sync, wallclock
from rsdrill_emulator.commands.base import Request, _admin_only
from rsdrill_emulator.commands.dispatcher import command
from rsdrill_emulator.errors import (
    CommandError,
)
from rsdrill_emulator.node import MemberState, Node
from rsdrill_emulator.oplog import OpTime

if TYPE_CHECKING:
    from rsdrill_emulator.commands.dispatcher import Commands


@command("replSetGetStatus")
async def _repl_status(cmds: Commands, req: Request) -> dict[str, Any]:
    _admin_only(req)
    return replset_status(cmds.node)


def _optime_fields(prefix: str, optime: OpTime, wall: dt.datetime | None) -> dict[str, Any]:
    return {
        prefix: optime.document(),
        f"{prefix}Date": optime.date(),
        f"last{prefix[0].upper()}{prefix[1:]}WallTime": wall,
    }


def replset_status(node: Node) -> dict[str, Any]:
    """replSetGetStatus as MongoDB shapes it (what the recovery probe polls)."""
    if node.state is MemberState.REMOVED:
        raise CommandError(93, "Our replica set config is invalid or we are not a member of it")
    now = wallclock.now()
    members = []
    for m in node.spec.members:
        state = node.member_state_of(m.host)
        entry: dict[str, Any] = {"_id": m.id, "name": m.host}
        if m.host == node.host:
            entry.update(
                health=1.0,
                state=int(state),
                stateStr=state.label,
                uptime=node.uptime_s(),
            )
            if not m.arbiter_only:
                entry.update(
                    optime=node.last_applied.document(),
                    optimeDate=node.last_applied.date(),
                    optimeDurable=node.last_durable.document(),
                    optimeDurableDate=node.last_durable.date(),
                    lastAppliedWallTime=node.last_applied_wall,
                    lastDurableWallTime=node.last_applied_wall,
                    syncSourceHost=node.sync_source,
                )
            entry.update(
                infoMessage=node.info_message,
                configVersion=node.config_id.version,
                configTerm=node.config_id.term,
                self=True,
                lastHeartbeatMessage="",
            )
            if state is MemberState.PRIMARY and node.election_time:
                entry["electionTime"] = node.election_time.timestamp
                entry["electionDate"] = node.election_time.date()
        else:
            peer = node.peers[m.host]
            entry.update(
                health=float(peer.health), state=int(state), stateStr=state.label, uptime=0
            )
            if not m.arbiter_only:
                entry.update(
                    optime=peer.applied.document(),
                    optimeDurable=peer.durable.document(),
                    optimeDate=peer.applied.date(),
                    optimeDurableDate=peer.durable.date(),
                    lastAppliedWallTime=peer.applied_wall,
                    lastDurableWallTime=peer.durable_wall,
                    syncSourceHost=peer.sync_source,
                )
            entry.update(
                lastHeartbeat=peer.last_heartbeat,
                lastHeartbeatRecv=peer.last_heartbeat_recv,
                pingMs=Int64(peer.ping_ms),
                lastHeartbeatMessage=peer.message,
                configVersion=peer.config_id.version if peer.config_id else -1,
                configTerm=peer.config_id.term if peer.config_id else -1,
            )
            if state is MemberState.PRIMARY and peer.election_time:
                entry["electionTime"] = peer.election_time.timestamp
                entry["electionDate"] = peer.election_time.date()
        members.append(entry)
    reply: dict[str, Any] = {
        "set": node.spec.set_name,
        "date": now,
        "myState": int(node.state),
        "term": Int64(node.term),
        "syncSourceHost": node.sync_source,
        "heartbeatIntervalMillis": Int64(node.spec.settings.heartbeat_interval_ms),
        "majorityVoteCount": node.spec.majority,
        "writeMajorityCount": node.spec.write_majority,
        "votingMembersCount": len(node.spec.voting),
        "writableVotingMembersCount": sum(1 for m in node.spec.voting if not m.arbiter_only),
        "optimes": {
            "lastCommittedOpTime": node.commit_point.document(),
            "lastCommittedWallTime": node.commit_point.date(),
            "readConcernMajorityOpTime": node.commit_point.document(),
            "appliedOpTime": node.last_applied.document(),
            "durableOpTime": node.last_durable.document(),
            "lastAppliedWallTime": node.last_applied_wall,
            "lastDurableWallTime": node.last_applied_wall,
        },
        "members": members,
    }
    if node.state is MemberState.PRIMARY and node.election_metrics:
        reply["electionCandidateMetrics"] = dict(node.election_metrics)
    if node.initial_sync_status is not None:
        reply["initialSyncStatus"] = dict(node.initial_sync_status)
    if node.too_stale:  # as mongod 4.2+ (SERVER-29803): RECOVERING and unable to catch up
        reply["tooStale"] = True
    return reply


@command("replSetGetConfig")
async def _repl_config(cmds: Commands, req: Request) -> dict[str, Any]:
    _admin_only(req)
    return {"config": replconfig.config_document(cmds.node)}


@command("replSetReconfig")
async def _reconfig(cmds: Commands, req: Request) -> dict[str, Any]:
    _admin_only(req)
    return await replconfig.reconfig(cmds.node, req.body)


@command("replSetStepDown")
async def _step_down(cmds: Commands, req: Request) -> dict[str, Any]:
    """Wait for an electable secondary to catch up, step down, hand the election off to it."""
    _admin_only(req)
    node = cmds.node
    if node.state is not MemberState.PRIMARY:
        raise CommandError(10107, "not primary so can't step down")
    secs = float(req.body.get("replSetStepDown") or 60)
    force = bool(req.body.get("force"))
    # As mongod: forced, it waits for no secondary unless told to (default 0 s, else 10 s).
    catch_up = float(req.body.get("secondaryCatchUpPeriodSecs", 0 if force else 10))
    if catch_up > secs:
        raise CommandError(2, "stepdown period must be longer than secondaryCatchUpPeriodSecs")
    node.writable = False  # no new writes while the secondaries catch up
    node.bump_topology()
    deadline = time.monotonic() + catch_up
    target = node.last_applied
    heir = None
    while True:
        caught = [
            p
            for p in node.peers.values()
            if p.health
            and p.spec.priority > 0
            and not p.spec.arbiter_only
            and p.state is MemberState.SECONDARY
            and p.applied >= target
        ]
        if caught:
            heir = max(caught, key=lambda p: p.spec.priority).spec.host
            break
        if time.monotonic() >= deadline or node.state is not MemberState.PRIMARY:
            break
        await node.progress.wait(deadline - time.monotonic())
    if heir is None and not force:
        if node.state is MemberState.PRIMARY:
            node.writable = True
            node.bump_topology()
        raise CommandError(
            262,
            "No electable secondaries caught up as of "
            f"{wallclock.now().isoformat()}. Please use the replSetStepDown "
            "command with the argument {force: true} to force node to step down.",
        )
    node.step_down(reason="replSetStepDown", freeze_s=secs)
    if heir is not None:
        try:
            await node.peer_calls.call(
                heir, {"replSetStepUp": 1, "skipDryRun": True}, purpose="handoff", timeout=1.0
            )
            node.events.emit("election_handoff", to=heir)
        except Exception:  # the heir will still win by timeout; the hand-off only speeds it up
            pass
    return {}


@command("replSetStepUp")
async def _step_up(cmds: Commands, req: Request) -> dict[str, Any]:
    _admin_only(req)
    node = cmds.node
    if node.state is MemberState.PRIMARY:
        return {}
    if not node.is_electable():
        raise CommandError(95, f"cannot step up from state {node.state.name}")
    won = await election.run_election(
        node, reason="stepUpRequest", skip_dry_run=bool(req.body.get("skipDryRun"))
    )
    if not won:
        raise CommandError(125, "Election failed.")
    return {}


@command("replSetFreeze")
async def _freeze(cmds: Commands, req: Request) -> dict[str, Any]:
    _admin_only(req)
    node = cmds.node
    if node.state is MemberState.PRIMARY:
        raise CommandError(95, "cannot freeze node when primary or running for election")
    secs = float(req.body.get("replSetFreeze") or 0)
    node.frozen_until = time.monotonic() + secs if secs else 0.0
    node.timer_changed.fire()  # unfrozen, it may stand at once
    node.events.emit("freeze", seconds=secs)
    return {"info": "unfreezing"} if not secs else {}


@command("replSetGetRBID")
async def _rbid(cmds: Commands, req: Request) -> dict[str, Any]:
    _admin_only(req)
    return {"rbid": cmds.node.rbid}


@command("replSetHeartbeat")
async def _heartbeat(cmds: Commands, req: Request) -> dict[str, Any]:
    return heartbeat.handle_heartbeat(cmds.node, req.body)


@command("replSetRequestVotes")
async def _request_votes(cmds: Commands, req: Request) -> dict[str, Any]:
    return await election.handle_request_votes(cmds.node, req.body)


@command("rsdrillGetOplog")
async def _get_oplog(cmds: Commands, req: Request) -> dict[str, Any]:
    cmds.opcounters["getmore"] += 1
    return await sync.handle_get_oplog(cmds.node, req.body)


@command("rsdrillHasOplog")
async def _has_oplog(cmds: Commands, req: Request) -> dict[str, Any]:
    return await sync.handle_has_oplog(cmds.node, req.body)


@command("rsdrillSyncBegin")
async def _sync_begin(cmds: Commands, req: Request) -> dict[str, Any]:
    return await sync.handle_sync_begin(cmds.node, req.body)


@command("rsdrillClone")
async def _clone(cmds: Commands, req: Request) -> dict[str, Any]:
    return await sync.handle_clone(cmds.node, req.body)
