"""The replica-set configuration a member holds, and how it changes: replSetReconfig (safe, on
the primary; forced, on any member), propagation by heartbeat, removal and re-addition.

MongoDB's rules (4.4+), which these follow:
- a config is identified by (version, term); the newer one wins: by term, then version, and by
  version alone when either term is -1 (a forced config);
- a safe reconfig runs on the primary only, once the current config is installed on a majority
  of its voting members, adds or removes at most one voting member, and needs a majority of the
  new config's voters reachable; it gets the next version and the current term;
- a forced reconfig runs on any member without any of those checks; its version jumps by tens
  of thousands (so two sides forced apart do not collide) and its term is -1;
- a member whose config is older learns the newer one from a heartbeat answer; a member not in
  it is REMOVED (it answers no reads or writes, joins no election) and keeps heartbeating the
  members of that config, so it learns when it is added back;
- a member's config survives its restart (local.system.replset).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Mapping
from dataclasses import asdict, replace
from typing import Any

from bson.int64 import Int64

from rsdrill.sandbox.config import MemberSpec
from rsdrill_emulator.configid import FORCED_TERM, ConfigId
from rsdrill_emulator.errors import CommandError
from rsdrill_emulator.node import MemberState, Node, PeerView

CONFIG_META = "replset_config"
MAX_VOTING = 7
MAX_MEMBERS = 50
# The member fields a config document may carry, with the only values the emulator implements.
_FIXED_FIELDS = {"hidden": False, "buildIndexes": True, "secondaryDelaySecs": 0, "slaveDelay": 0}


def member_document(m: MemberSpec) -> dict[str, Any]:
    return {
        "_id": m.id,
        "host": m.host,
        "arbiterOnly": m.arbiter_only,
        "buildIndexes": True,
        "hidden": False,
        "priority": m.priority,
        "tags": m.tags,
        "secondaryDelaySecs": Int64(0),
        "votes": m.votes,
    }


def config_document(node: Node) -> dict[str, Any]:
    """replSetGetConfig's `config` (and what heartbeats carry to a member behind)."""
    s = node.spec.settings
    return {
        "_id": node.spec.set_name,
        "version": node.config_id.version,
        "term": Int64(node.config_id.term),
        "protocolVersion": Int64(1),
        "writeConcernMajorityJournalDefault": True,
        "members": [member_document(m) for m in node.spec.members],
        "settings": {
            "chainingAllowed": s.chaining_allowed,
            "heartbeatIntervalMillis": s.heartbeat_interval_ms,
            "heartbeatTimeoutSecs": s.heartbeat_timeout_s,
            "electionTimeoutMillis": s.election_timeout_ms,
            "catchUpTimeoutMillis": s.catch_up_timeout_ms,
            "catchUpTakeoverDelayMillis": 30000,
            "getLastErrorModes": {},
            "getLastErrorDefaults": {"w": 1, "wtimeout": 0},
        },
    }


def _invalid(message: str) -> CommandError:
    return CommandError(93, message)


def parse_members(doc: Any, set_name: str) -> tuple[MemberSpec, ...]:
    """A config document's members, checked as mongod checks them (InvalidReplicaSetConfig)."""
    if not isinstance(doc, Mapping):
        raise CommandError(14, "replSetReconfig takes a config document")
    if doc.get("_id") != set_name:
        raise CommandError(
            103, f"New and old configurations differ in replica set name; old was {set_name}, "
            f"and new is {doc.get('_id')}"
        )  # fmt: skip
    raw = doc.get("members")
    if not isinstance(raw, list) or not raw:
        raise _invalid("a replica set config needs a non-empty members array")
    if len(raw) > MAX_MEMBERS:
        raise _invalid(f"replica sets may have at most {MAX_MEMBERS} members")
    members = tuple(_member(m) for m in raw)
    for attr in ("id", "host"):
        values = [getattr(m, attr) for m in members]
        twice = {v for v in values if values.count(v) > 1}
        if twice:
            raise _invalid(f"Found two member configurations with same {attr}: {sorted(twice)}")
    voting = [m for m in members if m.votes]
    if len(voting) > MAX_VOTING:
        raise _invalid(f"Replica set configuration contains {len(voting)} voting members, "
                       f"but must be at least 1 and no more than {MAX_VOTING}")  # fmt: skip
    if not voting:
        raise _invalid("Replica set configuration must contain at least one voting member")
    if not any(m.priority > 0 for m in voting):
        raise _invalid("This config must have at least one member with priority > 0")
    return members


def _member(raw: Any) -> MemberSpec:
    if not isinstance(raw, Mapping) or not isinstance(raw.get("host"), str) or "_id" not in raw:
        raise _invalid(f"each member needs an _id and a host: {raw!r}")
    for name, value in _FIXED_FIELDS.items():
        if name in raw and raw[name] != value:
            raise _invalid(f"member {raw['host']}: {name}: {raw[name]!r} is not emulated")
    arbiter = bool(raw.get("arbiterOnly", False))
    votes = int(raw.get("votes", 1))
    priority = float(raw.get("priority", 0.0 if arbiter else 1.0))
    if votes not in (0, 1):
        raise _invalid(f"member {raw['host']}: votes must be 0 or 1, not {votes}")
    if not 0 <= priority <= 1000:
        raise _invalid(f"member {raw['host']}: priority must be between 0 and 1000")
    if (votes == 0 or arbiter) and priority != 0:
        raise _invalid(f"member {raw['host']}: priority must be 0 when non-voting or an arbiter")
    tags = raw.get("tags") or {}
    if not isinstance(tags, Mapping) or not all(isinstance(v, str) for v in tags.values()):
        raise _invalid(f"member {raw['host']}: tags must be a document of strings")
    zone = tags.get("zone")
    others = tuple(sorted((str(k), str(v)) for k, v in tags.items() if k != "zone"))
    return MemberSpec(
        id=int(raw["_id"]), host=raw["host"], priority=priority, votes=votes,
        arbiter_only=arbiter, zone=zone, other_tags=others,
    )  # fmt: skip


# -- installing ------------------------------------------------------------------------------


def install(node: Node, members: tuple[MemberSpec, ...], config_id: ConfigId, *, why: str) -> None:
    """Adopt a config: persist it, rebuild the peers, and leave or join the set."""
    node.spec = replace(node.spec, members=members)
    node.config_id = config_id
    node.set_meta(CONFIG_META, {"version": config_id.version, "term": config_id.term,
                                "members": [asdict(m) for m in members]})  # fmt: skip
    _adopt(node, why)
    node.events.emit("config_installed", version=config_id.version, term=config_id.term,
                     members=[m.host for m in members], why=why)  # fmt: skip


def _adopt(node: Node, why: str) -> None:
    """Our own place in the set's members (none: REMOVED), and one peer view per other member
    (kept for members that stay, so what heartbeats told us survives)."""
    mine = next((m for m in node.spec.members if m.host == node.host), None)
    node.me = mine or MemberSpec(id=-1, host=node.host, priority=0.0, votes=0)
    views = {}
    for m in node.spec.members:
        if m.host != node.host:
            views[m.host] = node.peers.get(m.host) or PeerView(m)
            views[m.host].spec = m
    node.peers = views
    node.config_changed.fire()
    node.timer_changed.fire()  # votes and priorities decide who may stand
    node.heartbeat_now.fire()
    if mine is None:
        if node.state is MemberState.PRIMARY:
            node.step_down(reason="removed from the config")
        node.set_state(MemberState.REMOVED, reason=why)
        node.set_primary_host(None)
    elif node.state is MemberState.REMOVED:
        node.set_state(MemberState.RECOVERING, reason=why)
    node.bump_topology()
    node.progress.fire()


def load(node: Node) -> None:
    """At start: the config this member last installed, if any (else the sandbox's file)."""
    saved = node.database.get_meta(CONFIG_META)
    if not saved:
        return
    members = tuple(MemberSpec.from_dict(m) for m in saved["members"])
    node.spec = replace(node.spec, members=members)
    node.config_id = ConfigId(int(saved["version"]), int(saved["term"]))
    _adopt(node, "saved config")


def learn(node: Node, doc: Any, *, source: str) -> None:
    """A config from a heartbeat answer: installed when newer than ours."""
    if not isinstance(doc, Mapping):
        return
    theirs = ConfigId(int(doc.get("version", 0)), int(doc.get("term", FORCED_TERM)))
    if not theirs.newer_than(node.config_id):
        return
    try:
        members = parse_members(doc, node.spec.set_name)
    except CommandError as exc:
        node.events.emit("config_rejected", source=source, error=exc.message)
        return
    install(node, members, theirs, why=f"heartbeat from {source}")


def on_step_up(node: Node) -> None:
    """A new primary writes its term into the config (MongoDB 4.4+), so that every member can
    order configs made in different terms."""
    if node.config_id.term not in (FORCED_TERM, node.term):
        install(node, node.spec.members, ConfigId(node.config_id.version, node.term),
                why="stepped up")  # fmt: skip


# -- replSetReconfig -------------------------------------------------------------------------


def _installed_on_majority(node: Node, config_id: ConfigId) -> bool:
    """Whether a majority of the voting members hold `config_id` (we count ourselves)."""
    held = node.me.votes + sum(
        p.spec.votes for p in node.peers.values() if p.health and p.config_id == config_id
    )
    return held >= node.spec.majority


async def reconfig(node: Node, body: Mapping[str, Any]) -> dict[str, Any]:
    doc = body.get("replSetReconfig")
    force = bool(body.get("force"))
    members = parse_members(doc, node.spec.set_name)
    assert isinstance(doc, Mapping)
    if not any(m.host == node.host for m in members):
        raise CommandError(74, f"No host described in new configuration with version "
                           f"{doc.get('version')} for replica set {node.spec.set_name} maps "
                           f"to this node")  # fmt: skip
    if force:
        new_id = ConfigId(node.config_id.version + 10_000 + random.randrange(100_000), FORCED_TERM)
        install(node, members, new_id, why="replSetReconfig force")
        return {"ok": 1.0}
    if node.state is not MemberState.PRIMARY or not node.writable:
        raise CommandError(10107, "replSetReconfig should only be run on a writable PRIMARY. "
                           f"Current state {node.state.name};")  # fmt: skip
    version = int(doc.get("version", 0))
    if version <= node.config_id.version:
        raise CommandError(103, f"New config version {version} must be greater than old "
                           f"version {node.config_id.version}")  # fmt: skip
    timeout_s = float(body.get("maxTimeMS") or 60_000) / 1000
    # As mongod (4.4+): the config in force must be on a majority of its voters, and this
    # term's first entry committed, before another one may be made.
    current = node.config_id
    await _wait_for(node, timeout_s, lambda: _installed_on_majority(node, current)
                    and node.commit_point >= node.term_start, CommandError(
                        308, "the current config is not yet installed on a majority of its "
                        "voting members"))  # fmt: skip
    if node.config_id != current or node.state is not MemberState.PRIMARY:
        raise CommandError(109, "Cannot run replSetReconfig because the node is currently "
                           "updating its configuration")  # fmt: skip
    old_voters = {m.host for m in node.spec.members if m.votes}
    new_voters = {m.host for m in members if m.votes}
    if len(old_voters ^ new_voters) > 1:
        raise CommandError(103, "Non force replica set reconfig can only add or remove at "
                           "most 1 voting member.")  # fmt: skip
    reachable = sum(
        1 for m in members
        if m.votes and (m.host == node.host or ((p := node.peers.get(m.host)) and p.health))
    )  # fmt: skip
    if reachable < len(new_voters) // 2 + 1:
        raise CommandError(74, f"Quorum check failed because not enough voting nodes "
                           f"responded; required {len(new_voters) // 2 + 1} but only "
                           f"{reachable} are reachable")  # fmt: skip
    new_id = ConfigId(version, node.term)
    install(node, members, new_id, why="replSetReconfig")
    # As mongod: the command returns once the new config is on a majority of its voters.
    await _wait_for(node, timeout_s, lambda: _installed_on_majority(node, new_id), CommandError(
        50, "replSetReconfig timed out waiting for the new config to propagate to a majority "
        "of its voting members"))  # fmt: skip
    return {"ok": 1.0}


async def _wait_for(
    node: Node, timeout_s: float, done: Callable[[], bool], error: CommandError
) -> None:
    try:
        async with asyncio.timeout(timeout_s):
            while not done():
                node.heartbeat_now.fire()
                await node.progress.wait(0.1)
    except TimeoutError:
        raise error from None
