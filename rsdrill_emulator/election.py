"""Elections (MongoDB's protocol version 1, a Raft variant).

The election timer fires electionTimeoutMillis plus up to 15 % after the last sign of a primary.
A candidate first runs a dry run (no term change), then a real election in term + 1; voters grant
one vote per term to a candidate at least as up to date as they are. The winner catches up to
the freshest member it can see, drains, writes a new-term entry and only then accepts writes.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from typing import Any

from bson.int64 import Int64

from rsdrill_emulator import replconfig, takeover, wallclock
from rsdrill_emulator.configid import ConfigId
from rsdrill_emulator.node import MemberState, Node
from rsdrill_emulator.oplog import OpTime
from rsdrill_emulator.peer import PeerError
from rsdrill_emulator.sync import catch_up

TIMER_RECHECK_S = 1.0
"""The longest the election timer sleeps without a reason to wake (a wake-up it was not sent
would cost at most this)."""


async def election_timer_loop(node: Node) -> None:
    """Stand for election when the timer expires and this member may stand. It sleeps until
    the soonest moment it could act, as mongod's timer is a callback at its deadline: polling
    every 20 ms cost an idle member more CPU than all else it does."""
    while True:
        await node.timer_changed.wait(_until_due(node))
        if node.state is MemberState.PRIMARY or not node.is_electable():
            continue
        sole_voter = node.me.votes and not any(p.spec.votes for p in node.peers.values())
        if sole_voter or time.monotonic() >= node.election_deadline:
            await run_election(node, reason="single voter" if sole_voter else "election timeout")
        elif takeover.due(node):
            await run_election(node, reason="priority takeover")


def _until_due(node: Node) -> float:
    """Seconds until the election deadline, a scheduled takeover or the end of a freeze,
    whichever comes first and is still ahead; at most TIMER_RECHECK_S. What else changes
    whether it may stand (its state, the config, a new deadline) wakes it by `timer_changed`."""
    now = time.monotonic()
    moments = [node.election_deadline, node.frozen_until, node.takeover_at or 0.0]
    ahead = [t - now for t in moments if t > now]
    return min([*ahead, TIMER_RECHECK_S])


async def _collect_votes(
    node: Node, request: dict[str, Any], timeout: float
) -> tuple[int, int, list[dict[str, Any]]]:
    """Ask every voting peer; return (votes incl. ours, highest term seen, replies)."""
    voters = [h for h, p in node.peers.items() if p.spec.votes > 0]

    async def ask(host: str) -> dict[str, Any] | None:
        try:
            reply = await node.peer_calls.call(
                host, request, purpose=f"vote-{request['dryRun']}", timeout=timeout
            )
        except PeerError:
            return None
        node.peers[host].last_contact_mono = time.monotonic()
        return reply

    votes = node.me.votes
    highest = node.term
    replies: list[dict[str, Any]] = []
    pending = {asyncio.ensure_future(ask(h)) for h in voters}
    while pending and votes < node.spec.majority:
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        for fut in done:
            reply = fut.result()
            if not reply or not reply.get("ok"):
                continue
            replies.append(reply)
            highest = max(highest, int(reply.get("term", 0)))
            if reply.get("voteGranted"):
                votes += 1
    for fut in pending:
        fut.cancel()
    return votes, highest, replies


async def run_election(node: Node, *, reason: str, skip_dry_run: bool = False) -> bool:
    """Dry run, then a real election. True when this member won."""
    timeout = node.spec.settings.election_timeout_ms / 1000
    node.reset_election_timer()
    base = {
        "replSetRequestVotes": 1,
        "setName": node.spec.set_name,
        "candidateIndex": node.me.id,
        **node.config_id.document(),
    }
    if not skip_dry_run:
        dry_run = {**base, "dryRun": True, "term": Int64(node.term),
                   "lastAppliedOpTime": node.last_applied.document()}  # fmt: skip
        votes, highest, _ = await _collect_votes(node, dry_run, timeout)
        if highest > node.term:
            node.observe_term(highest, "dry-run reply")
        if votes < node.spec.majority or not node.is_electable():
            node.events.emit("dry_run_lost", votes=votes, term=node.term)
            return False
    node.term += 1
    node.voted = (node.term, node.me.id)
    called = wallclock.now()
    node.events.emit("election_called", term=node.term, reason=reason)
    await node.persist_term()
    term = node.term
    # Where it stands now, as mongod's vote requester reads it for the real election: what it
    # applied during the dry run counts (a primary taken over writes until it steps down).
    real = {**base, "dryRun": False, "term": Int64(term),
            "lastAppliedOpTime": node.last_applied.document()}  # fmt: skip
    votes, highest, replies = await _collect_votes(node, real, timeout)
    if highest > term:
        node.observe_term(highest, "vote reply")
    if node.term != term or votes < node.spec.majority or node.state is not MemberState.SECONDARY:
        # The timer is not restarted: as mongod's, it runs from when this attempt began, so
        # after a split vote that waited out an unreachable voter the next try comes within
        # the offset, not a whole timeout later.
        node.events.emit("election_lost", votes=votes, term=term)
        return False
    await _become_primary(node, replies, reason, called)
    return True


async def _become_primary(
    node: Node, replies: list[dict[str, Any]], reason: str, called: dt.datetime
) -> None:
    term = node.term
    node.election_time = node.last_applied
    node.election_metrics = {
        "lastElectionReason": reason,
        "lastElectionDate": called,  # when this member ran for election, as MongoDB records
        "electionTerm": Int64(term),
        "lastSeenOpTimeAtElection": node.last_applied.document(),
        "numVotesNeeded": node.spec.majority,
        "priorityAtElection": node.me.priority,
        "electionTimeoutMillis": Int64(node.spec.settings.election_timeout_ms),
    }
    node.set_state(MemberState.PRIMARY, reason="won election")
    # As mongod restarting its heartbeats on a win: every member's liveness counts from now, so
    # the new primary's first majority check comes one election timeout after its heartbeats.
    now = time.monotonic()
    for peer in node.peers.values():
        peer.last_contact_mono = now
    replconfig.on_step_up(node)
    node.set_primary_host(node.host)
    node.events.emit("election_won", term=term)
    freshest = max((OpTime.from_doc(r.get("lastAppliedOpTime")) for r in replies), default=None)
    if freshest is not None and freshest > node.last_applied:
        await catch_up(node, freshest)
    if node.term != term or node.state is not MemberState.PRIMARY:
        return
    # Drained (entries are applied as they arrive); open the new term with its first entry.
    node.writable = True
    start = node.write_noop("new primary")
    node.writable = False
    node.term_start = start
    node.election_metrics["newTermStartDate"] = wallclock.now()
    node.writable = True
    node.bump_topology()
    node.events.emit("writable", term=term)
    asyncio.get_running_loop().create_task(_await_majority_availability(node, start, term))


async def _await_majority_availability(node: Node, start: OpTime, term: int) -> None:
    while node.term == term and node.state is MemberState.PRIMARY:
        if node.commit_point >= start:
            assert node.election_metrics is not None
            node.election_metrics["wMajorityWriteAvailabilityDate"] = wallclock.now()
            node.events.emit("majority_writable", term=term)
            return
        await node.progress.wait(1.0)


def _healthy_primary_at_least(node: Node, candidate: int) -> bool:
    priority = next((m.priority for m in node.spec.members if m.id == candidate), 0.0)
    return any(
        p.health and p.state is MemberState.PRIMARY and p.spec.priority >= priority
        for p in node.peers.values()
        if p.spec.id != candidate
    )


async def handle_request_votes(node: Node, cmd: dict[str, Any]) -> dict[str, Any]:
    """The replSetRequestVotes command, from the voter's side."""
    term = int(cmd["term"])
    dry_run = bool(cmd.get("dryRun"))
    candidate = int(cmd["candidateIndex"])
    their_optime = OpTime.from_doc(cmd.get("lastAppliedOpTime"))
    if not dry_run:
        node.observe_term(term, f"candidate {candidate}")
    reason = ""
    theirs = ConfigId.of(cmd)
    if node.state is MemberState.REMOVED:
        reason = "not a member of the current config"
    elif theirs is not None and node.config_id.newer_than(theirs):
        reason = (f"candidate's config (version {theirs.version}, term {theirs.term}) is "
                  f"older than mine (version {node.config_id.version}, term "
                  f"{node.config_id.term})")  # fmt: skip
    elif term < node.term:
        reason = f"candidate's term ({term}) is lower than mine ({node.term})"
    elif not node.is_arbiter and their_optime < node.last_applied:
        reason = "candidate's data is staler than mine"
    elif not dry_run and node.voted and node.voted[0] == term and node.voted[1] != candidate:
        reason = f"already voted for another candidate in term {term}"
    elif node.is_arbiter and _healthy_primary_at_least(node, candidate):
        # MongoDB's one veto: an arbiter that sees a good primary keeps it.
        reason = "can see a healthy primary of equal or greater priority"
    granted = not reason
    if granted and not dry_run:
        node.voted = (term, candidate)
        # The timer first: while the vote is made durable, this member's own expired timer
        # would stand it in the next term and depose the candidate it is voting for (CI46:
        # 10 s more without a primary, a second election timeout).
        node.reset_election_timer()
        await node.persist_term()
    node.events.emit("vote", term=term, candidate=candidate, dry_run=dry_run, granted=granted)
    return {
        "term": Int64(node.term),
        "voteGranted": granted,
        "reason": reason,
        "lastAppliedOpTime": node.last_applied.document(),
        "ok": 1.0,
    }
