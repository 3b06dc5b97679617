"""Heartbeats: every member asks every other one how it is, every heartbeatIntervalMillis.

A peer is marked DOWN (health 0) once heartbeatTimeoutSecs pass without a good answer. A
heartbeat from the primary of the current term resets the election timer; a primary that
stops hearing from a voting majority steps down (see `liveness_loop`).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from bson.int64 import Int64

from rsdrill_emulator import replconfig, takeover, wallclock
from rsdrill_emulator.configid import ConfigId
from rsdrill_emulator.node import MemberState, Node
from rsdrill_emulator.oplog import OpTime
from rsdrill_emulator.peer import PeerError


def status_fields(node: Node) -> dict[str, Any]:
    """What a member says about itself in both heartbeat directions."""
    return {
        "from": node.host,
        "term": Int64(node.term),
        "state": int(node.state),
        "applied": node.last_applied.document(),
        "durable": node.last_durable.document(),
        "appliedWall": node.last_applied_wall,
        "primary": node.primary_host or "",
        "commitPoint": node.commit_point.document(),
        "syncSource": node.sync_source,
        "electionTime": node.election_time.document() if node.election_time else None,
        **node.config_id.document(),
    }


def heartbeat_request(node: Node) -> dict[str, Any]:
    return {"replSetHeartbeat": node.spec.set_name, **status_fields(node)}


def absorb(node: Node, doc: dict[str, Any], *, is_response: bool) -> None:
    """Update our view of the sender from its heartbeat (request or response)."""
    host = doc.get("from")
    if not isinstance(host, str) or (peer := node.peers.get(host)) is None:
        return
    now = wallclock.now()
    peer.last_ok_mono = time.monotonic()
    if is_response:
        peer.last_heartbeat = now
        peer.last_answer_mono = peer.last_ok_mono
    else:
        peer.last_heartbeat_recv = now
    term = int(doc["term"])
    state = MemberState(int(doc["state"]))
    was_healthy_state = (peer.health, peer.state)
    peer.health = 1
    peer.state = state
    peer.term = term
    peer.sync_source = doc.get("syncSource", "")
    election_time = doc.get("electionTime")
    peer.election_time = OpTime.from_doc(election_time) if election_time else None
    peer.config_id = ConfigId.of(doc)
    node.note_position(
        host,
        OpTime.from_doc(doc["applied"]),
        OpTime.from_doc(doc["durable"]),
        applied_wall=doc.get("appliedWall"),
        durable_wall=doc.get("appliedWall"),
    )
    node.observe_term(term, host)
    if state is MemberState.PRIMARY and term >= node.term:
        if node.state is MemberState.PRIMARY and node.host != host:
            node.step_down(reason=f"{host} is primary in term {term}")
        if not is_response and node.primary_host != host:
            # A new primary's heartbeat: answer with ours at once (mongod restarts the
            # heartbeats it has not sent yet), so the new primary hears from us in time.
            node.heartbeat_now.fire()
        node.set_primary_host(host)
        if term == node.term:
            node.reset_election_timer()
            node.learn_commit_point(OpTime.from_doc(doc["commitPoint"]))
            takeover.consider(node, host)
    elif node.primary_host == host:
        node.set_primary_host(None)
    if (peer.health, peer.state) != was_healthy_state:
        node.bump_topology()


def handle_heartbeat(node: Node, cmd: dict[str, Any]) -> dict[str, Any]:
    """The replSetHeartbeat command: take in the sender's view, answer with ours."""
    if cmd.get("replSetHeartbeat") != node.spec.set_name:
        return {
            "ok": 0.0,
            "code": 93,
            "codeName": "InvalidReplicaSetConfig",
            "errmsg": "replica set names do not match",
        }
    absorb(node, cmd, is_response=False)
    reply = {"setName": node.spec.set_name, **status_fields(node), "ok": 1.0}
    # Answered to anyone of the set, member or not: one whose config is older gets ours (and
    # learns if it was removed); one whose config is newer is asked for it.
    theirs = ConfigId.of(cmd)
    if theirs is not None and node.config_id.newer_than(theirs):
        reply["config"] = replconfig.config_document(node)
    elif theirs is not None and theirs.newer_than(node.config_id):
        ask_for_config(node, str(cmd.get("from", "")))
    return reply


# Config requests under way, by host (held here: the event loop keeps only weak references).
_asking: dict[str, asyncio.Task[None]] = {}


def ask_for_config(node: Node, host: str) -> None:
    """A member told us its config is newer: heartbeat it once at once to get it (it may not
    be one we heartbeat: a member of a config we do not have yet)."""
    if host in _asking or host == node.host:
        return

    async def ask() -> None:
        try:
            timeout = node.spec.settings.heartbeat_timeout_s
            request = heartbeat_request(node)
            reply = await node.peer_calls.call(host, request, purpose="heartbeat", timeout=timeout)
            replconfig.learn(node, reply.get("config"), source=host)
        except PeerError:
            pass
        finally:
            del _asking[host]

    _asking[host] = asyncio.get_running_loop().create_task(ask())


def mark_unreachable(node: Node, host: str) -> None:
    peer = node.peers.get(host)
    if peer is None:  # no longer a member
        return
    peer.last_heartbeat = wallclock.now()
    timeout = node.spec.settings.heartbeat_timeout_s
    if peer.health and (
        peer.last_ok_mono is None or time.monotonic() - peer.last_ok_mono > timeout
    ):
        peer.health = 0
        peer.state = MemberState.DOWN
        node.events.emit("peer_down", peer=host)
        if node.primary_host == host:
            node.set_primary_host(None)
        node.bump_topology()


def heartbeat_interval_s(node: Node) -> float:
    """mongod's: heartbeatIntervalMillis, but a member that has lost its sync source (and is not
    primary) looks for one at a quarter of it, and an arbiter at most every half election
    timeout (each capped at half the election timeout)."""
    interval = node.spec.settings.heartbeat_interval_ms / 1000
    half_election = node.spec.settings.election_timeout_ms / 2000
    if node.state is MemberState.PRIMARY:
        return interval
    if node.is_arbiter:
        return min(half_election, interval)
    if not node.sync_source:
        return min(half_election, interval / 4)
    return interval


async def heartbeat_loop(node: Node, host: str) -> None:
    """Heartbeat one peer forever, every interval (sooner when asked to)."""
    # A frozen peer holds one heartbeat at most two configured intervals, not the whole timeout.
    wait = min(
        node.spec.settings.heartbeat_timeout_s, node.spec.settings.heartbeat_interval_ms / 500
    )
    while True:
        interval = heartbeat_interval_s(node)
        started = time.monotonic()
        try:
            request = heartbeat_request(node)
            reply = await node.peer_calls.call(host, request, purpose="heartbeat", timeout=wait)
            if reply.get("ok"):
                replconfig.learn(node, reply.get("config"), source=host)
                if (peer := node.peers.get(host)) is None:  # that config removed it
                    return
                peer.ping_ms = int((time.monotonic() - started) * 1000)
                absorb(node, reply, is_response=True)
            else:
                mark_unreachable(node, host)
        except PeerError:
            mark_unreachable(node, host)
        await node.heartbeat_now.wait(interval - (time.monotonic() - started))


async def heartbeat_all(node: Node) -> None:
    """One heartbeat loop per member of the config we hold, whatever it becomes."""
    loops: dict[str, asyncio.Task[None]] = {}
    while True:
        for host in [h for h, task in loops.items() if task.done()]:
            del loops[host]
        for host in set(loops) - set(node.peers):
            loops.pop(host).cancel()
        for host in set(node.peers) - set(loops):
            loops[host] = asyncio.get_running_loop().create_task(heartbeat_loop(node, host))
        await node.config_changed.wait(3600)


async def liveness_loop(node: Node) -> None:
    """A primary that has not heard from a voting majority within electionTimeout steps down.

    MongoDB's liveness timeout fires when the majority's last contact expires: a primary sleeps
    until that moment, any other member until its state changes; a new state or config (which
    may count more voters) bumps the topology and ends either sleep. No polling: each wake-up
    of an idle member costs CPU."""
    window = node.spec.settings.election_timeout_ms / 1000
    while True:
        if node.state is not MemberState.PRIMARY:
            await node.topology_changed.wait(LIVENESS_IDLE_RECHECK_S)
            continue
        now = time.monotonic()
        expires = majority_contact_expires(node, window)
        if expires is not None and expires < now:
            node.step_down(reason="cannot see a majority of voting members")
            continue
        until = LIVENESS_IDLE_RECHECK_S if expires is None else expires - now
        await node.topology_changed.wait(min(until, LIVENESS_IDLE_RECHECK_S))


# Every change that could end a sleep early fires the signal waited on; this is a safety net.
LIVENESS_IDLE_RECHECK_S = 60.0


def majority_contact_expires(node: Node, window: float) -> float | None:
    """When this member stops seeing a voting majority (monotonic seconds): the moment the
    contact that completes the majority turns `window` old; None when it alone is one."""
    needed = node.spec.majority - node.me.votes
    if needed <= 0:
        return None
    contacts = sorted(
        (
            p.last_contact_mono
            for p in node.peers.values()
            if p.spec.votes and p.last_contact_mono is not None
        ),
        reverse=True,
    )
    if len(contacts) < needed:
        return float("-inf")
    return contacts[needed - 1] + window
