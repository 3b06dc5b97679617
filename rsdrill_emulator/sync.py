"""Replication from a sync source: the oplog fetcher, initial sync, rollback, "too stale".

A secondary long-polls its sync source for entries after its last applied optime, applies them,
journals them and asks again; the request itself tells the source (the primary) how far this
member has got, which is what write concern waits on. The source answers "divergent" when the
asker's last entry is not in its oplog (the asker must roll back) and "too stale" when the asker's
position fell off the source's capped oplog (it needs a full resync).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import time
from pathlib import Path
from typing import Any

import bson
from bson.binary import Binary
from bson.int64 import Int64

from rsdrill.sandbox.config import NO_ROLLBACK_FILES_ENV
from rsdrill_emulator.datastore import collection_uuid, id_key
from rsdrill_emulator.errors import CommandError
from rsdrill_emulator.node import MemberState, Node, PeerView
from rsdrill_emulator.oplog import NULL_OPTIME, OpTime, changed_ids
from rsdrill_emulator.peer import PeerError

# Small enough that applying, serving or storing one batch never holds a member's event loop
# for long (a clone batch of 8 MiB took 40 ms to read and encode on an idle machine, 1 MiB 3 ms):
# mongod serves a clone from threads of its own, beside the writes.
FETCH_MAX_BYTES = 1024 * 1024
# mongod's oplogNetworkTimeoutBufferSeconds: its fetcher's socket timeout is the time a source
# may hold a getMore (half the election timeout, at most 30 s) plus this. A source cut off by
# the network is given up then, whatever this emulator's shorter wait.
NETWORK_TIMEOUT_BUFFER_S = 5.0
CLONE_BATCH_BYTES = 1024 * 1024

# How long a source whose fetch got no answer in time (cut off, frozen) is passed by, as by
# mongod's sync source resolver after a network error (kFetcherErrorDenylistDuration); here
# less, once it answers a heartbeat again. Without it a secondary whose fetch timed out before
# its heartbeats marked the cut-off primary down fetched from it again, and the new primary
# waited another fetch timeout (10 s) for a majority.
FETCH_ERROR_DENYLIST_S = 10.0
STALE = "OplogStartMissing"
DIVERGENT = "OplogDivergent"


# -- the source's side -----------------------------------------------------------------------


async def handle_get_oplog(node: Node, cmd: dict[str, Any]) -> dict[str, Any]:
    """rsdrillGetOplog: entries after `after` (or from it, with `inclusive`), long-polled."""
    after = OpTime.from_doc(cmd.get("after"))
    asker = cmd.get("from", "")
    if asker:
        # The asker's term first: a primary deposed while it was frozen steps down here, before
        # it could count the position of a member of the new term towards w:majority (as
        # mongod's replSetUpdatePosition carries the term).
        node.observe_term(int(cmd.get("term", 0)), asker)
        node.note_position(
            asker,
            OpTime.from_doc(cmd.get("applied")),
            OpTime.from_doc(cmd.get("durable")),
            applied_wall=cmd.get("appliedWall"),
            durable_wall=cmd.get("appliedWall"),
        )
    if not node.oplog.cached(after):
        await node.storage_idle()
    if node.is_arbiter or node.state not in (MemberState.PRIMARY, MemberState.SECONDARY):
        return _meta(node, {"ok": 0.0, "code": 13436, "errmsg": "not a sync source now"})
    if not node.oplog.contains(after):
        if after < node.oplog.oldest or after == NULL_OPTIME:
            return _meta(
                node,
                {
                    "ok": 0.0,
                    "code": 286,
                    "codeName": STALE,
                    "errmsg": "requested position has fallen off the oplog",
                },
            )
        if after > node.last_applied and node.state is not MemberState.PRIMARY:
            return _meta(node, {"ok": 0.0, "code": 13436, "errmsg": "source is behind"})
        return _meta(
            node,
            {
                "ok": 0.0,
                "code": 287,
                "codeName": DIVERGENT,
                "errmsg": "requested position is not in this oplog",
            },
        )
    max_bytes = int(cmd.get("maxBytes", FETCH_MAX_BYTES))
    deadline = time.monotonic() + float(cmd.get("maxWaitMS", 0)) / 1000
    while True:
        if not node.oplog.cached(after):
            await node.storage_idle()
        if node.state not in (MemberState.PRIMARY, MemberState.SECONDARY) or not (
            node.oplog.contains(after)
        ):
            # Rolled back while the asker waited (the soak's finding): what follows `after` now
            # is another branch, on which the asker's last entry never was. Asked again, this
            # member tells it that it diverged.
            return _meta(node, {"ok": 0.0, "code": 13436, "errmsg": "source rolled back"})
        entries = node.oplog.entries_after(after, max_bytes)
        if cmd.get("inclusive"):
            first = node.oplog.entry_at(after)
            entries = [first, *entries] if first else entries
        remaining = deadline - time.monotonic()
        if entries or remaining <= 0:
            return _meta(node, {"entries": entries, "ok": 1.0})
        await node.new_entries.wait(remaining)


def _meta(node: Node, reply: dict[str, Any]) -> dict[str, Any]:
    """Replication metadata on every answer: who is primary, in which term, commit point."""
    reply.update(
        term=Int64(node.term),
        isPrimary=node.state is MemberState.PRIMARY,
        lastApplied=node.last_applied.document(),
        commitPoint=node.commit_point.document(),
    )
    return reply


async def handle_has_oplog(node: Node, cmd: dict[str, Any]) -> dict[str, Any]:
    """rsdrillHasOplog: which of the given optimes this member's oplog holds (rollback)."""
    keys = [OpTime.from_doc(d) for d in cmd.get("optimes", [])]
    return {
        "present": [node.oplog.contains(k) for k in keys],
        "oldest": node.oplog.oldest.document(),
        "ok": 1.0,
    }


# -- the fetching side -----------------------------------------------------------------------


def choose_source(node: Node) -> str | None:
    """The primary when we know a healthy one (no chaining), else the freshest healthy secondary."""
    if node.primary_host and node.primary_host != node.host:
        peer = node.peers.get(node.primary_host)
        if peer and _fetchable(peer):
            return node.primary_host
    ahead = [
        p
        for p in node.peers.values()
        if _fetchable(p)
        and not p.spec.arbiter_only
        and p.state is MemberState.SECONDARY
        and p.applied > node.last_applied
    ]
    return max(ahead, key=lambda p: p.applied).spec.host if ahead else None


def _fetchable(peer: PeerView) -> bool:
    failed = peer.fetch_failed_mono
    if not peer.health or failed is None:
        return bool(peer.health)
    answered = peer.last_answer_mono
    return (answered is not None and answered > failed) or (
        time.monotonic() - failed >= FETCH_ERROR_DENYLIST_S
    )


def apply_batch(node: Node, entries: list[dict[str, Any]]) -> int:
    """Apply the entries newer than our position (a batch may overlap what we already have)."""
    fresh = [e for e in entries if OpTime.of(e) > node.last_applied]
    for entry in fresh:
        node.apply_replicated(entry)
    return len(fresh)


def _fetch_request(node: Node, after: OpTime, **extra: Any) -> dict[str, Any]:
    return {
        "rsdrillGetOplog": 1,
        "from": node.host,
        "term": Int64(node.term),
        "after": after.document(),
        "applied": node.last_applied.document(),
        "durable": node.last_durable.document(),
        "appliedWall": node.last_applied_wall,
        "maxBytes": FETCH_MAX_BYTES,
        **extra,
    }


async def fetch_once(node: Node, source: str, wait_s: float) -> dict[str, Any]:
    """One fetch round: ask, apply, journal; returns the source's reply."""
    after = node.last_applied
    reply = await node.peer_calls.call(
        source,
        _fetch_request(node, after, maxWaitMS=int(wait_s * 1000)),
        purpose="fetch",
        timeout=min(node.spec.settings.election_timeout_ms / 2000, 30) + NETWORK_TIMEOUT_BUFFER_S,
    )
    node.observe_term(int(reply.get("term", 0)), source)
    if not reply.get("ok"):
        return reply
    await node.storage_idle()
    if node.replication_stopped:
        # stopReplProducer set while this fetch waited: mongod's fetcher ignores the batch.
        return reply
    if node.state is MemberState.PRIMARY or node.last_applied != after:
        # Elected while this fetch was in flight (and maybe deposed again), or rolled back: the
        # entries followed a position that is no longer our newest, so they would sit on top of
        # entries the source does not have. The next fetch asks from where we are (mongod's
        # fetcher checks each batch starts at its last fetched optime).
        return reply
    if apply_batch(node, reply.get("entries", [])):
        await node.flush()
    if reply.get("isPrimary") and int(reply["term"]) == node.term:
        node.reset_election_timer()
        node.set_primary_host(source)
        node.learn_commit_point(OpTime.from_doc(reply.get("commitPoint")))
    return reply


async def fetcher_loop(node: Node) -> None:
    """Keep a data-bearing non-primary member replicating, whatever state it is in."""
    while True:
        try:
            await _fetch_step(node)
        except PeerError as exc:
            node.info_message = str(exc)
            await asyncio.sleep(0.05)


async def _fetch_step(node: Node) -> None:
    if node.is_arbiter or node.state in (MemberState.PRIMARY, MemberState.REMOVED):
        node.sync_source = ""  # as mongod: a primary, or a member of no config, syncs from none
        await node.topology_changed.wait(1.0)
        return
    if node.needs_initial_sync:
        await initial_sync(node)
        return
    if node.too_stale:
        await asyncio.sleep(1.0)
        return
    if node.replication_stopped:  # the stopReplProducer fail point
        await asyncio.sleep(0.05)
        return
    source = choose_source(node)
    if source is None:
        node.sync_source = ""
        maybe_finish_recovering(node, no_source=True)
        await node.topology_changed.wait(0.2)
        return
    if source != node.sync_source:
        node.sync_source = source
        node.events.emit("sync_source", source=source)
    # Answers from the primary reset the election timer, so they must come well within it.
    wait_s = min(1.0, node.spec.settings.election_timeout_ms / 4000)
    try:
        reply = await fetch_once(node, source, wait_s)
    except PeerError as exc:
        # Only a fetch that got no answer in time: a connection reset (a proxy put between the
        # members, a restart) is retried at once, as mongod's fetcher restarts on the same source.
        if exc.timed_out and (peer := node.peers.get(source)) is not None:
            peer.fetch_failed_mono = time.monotonic()
        raise
    if reply.get("ok"):
        if node.state is MemberState.RECOVERING and node.min_valid == NULL_OPTIME:
            node.min_valid = OpTime.from_doc(reply.get("lastApplied"))
        maybe_finish_recovering(node, no_source=False)
        return
    name = reply.get("codeName")
    if name == STALE:
        node.too_stale = True
        node.info_message = f"too stale to catch up: {source} no longer has our last entry"
        node.set_state(MemberState.RECOVERING, reason="too stale")
        node.events.emit("too_stale", source=source)
    elif name == DIVERGENT:
        await rollback(node, source)
    else:
        await asyncio.sleep(0.1)


def maybe_finish_recovering(node: Node, *, no_source: bool) -> None:
    """RECOVERING → SECONDARY once caught up to minValid, or when there is nobody to ask."""
    if node.state is not MemberState.RECOVERING or node.too_stale:
        return
    if no_source:
        # Only after every peer had a chance to answer a heartbeat: there may be a primary.
        if any(p.last_heartbeat is None for p in node.peers.values()):
            return
        if any(p.health and p.state is MemberState.PRIMARY for p in node.peers.values()):
            return
    elif node.last_applied < node.min_valid:
        return
    node.min_valid = NULL_OPTIME
    node.info_message = ""
    node.set_state(MemberState.SECONDARY, reason="caught up")


async def catch_up(node: Node, target: OpTime) -> None:
    """A new primary fetches what another member has beyond its own position (catch-up)."""
    node.events.emit("catchup_start", target=str(target))
    limit_ms = node.spec.settings.catch_up_timeout_ms
    deadline = None if limit_ms < 0 else time.monotonic() + limit_ms / 1000
    term = node.term
    while node.last_applied < target and node.term == term:
        if deadline is not None and time.monotonic() > deadline:
            break
        source = max(
            (p for p in node.peers.values() if p.health and p.applied > node.last_applied),
            key=lambda p: p.applied,
            default=None,
        )
        if source is None:
            break
        try:
            reply = await node.peer_calls.call(
                source.spec.host,
                _fetch_request(node, node.last_applied, maxWaitMS=0),
                purpose="catchup",
                timeout=node.spec.settings.heartbeat_timeout_s,
            )
        except PeerError:
            break
        if not reply.get("ok"):
            break
        apply_batch(node, reply.get("entries", []))
    await node.flush()
    node.events.emit("catchup_end", reached=str(node.last_applied))


# -- initial sync ----------------------------------------------------------------------------


async def initial_sync(node: Node) -> None:
    """STARTUP2: clone every collection from a source over TCP, then apply the oplog since."""
    candidates = sorted(
        (
            p
            for p in node.peers.values()
            if p.health
            and not p.spec.arbiter_only
            and p.state in (MemberState.PRIMARY, MemberState.SECONDARY)
        ),
        key=lambda p: p.state is not MemberState.PRIMARY,
    )
    source = candidates[0].spec.host if candidates else None
    if source is None:
        await node.topology_changed.wait(0.5)
        return
    node.set_state(MemberState.STARTUP2, reason="initial sync")
    node.sync_source = source
    started = time.monotonic()
    node.events.emit("initial_sync_start", source=source)
    node.set_meta("needs_initial_sync", True)
    node.store.clear()
    node.oplog.clear()
    begin_reply = _ok(
        await node.peer_calls.call(source, {"rsdrillSyncBegin": 1}, purpose="clone", timeout=30),
        source,
    )
    begin = OpTime.from_doc(begin_reply["lastApplied"])
    node.initial_sync_status = {
        "failedInitialSyncAttempts": 0,
        "initialSyncStart": dt.datetime.now(dt.UTC),
        "approxTotalDataSize": Int64(begin_reply["totalSize"]),
        "approxTotalBytesCopied": Int64(0),
        "syncSource": source,
    }
    rate = node.spec.initial_sync_bytes_per_s
    uuids = begin_reply.get("uuids", {})
    for ns in begin_reply["namespaces"]:
        if (view := begin_reply.get("views", {}).get(ns)) is None:
            node.store.create(ns, collection_uuid(uuids.get(ns)))
        for spec in begin_reply.get("indexes", {}).get(ns, []):
            node.store.add_index(ns, spec)
        if view is not None:
            node.store.create_view(ns, view)
        if options := begin_reply.get("options", {}).get(ns):
            node.store.set_options(ns, options)
        position = 0
        while True:
            request = {"rsdrillClone": ns, "after": Int64(position), "maxBytes": CLONE_BATCH_BYTES}
            reply = _ok(
                await node.peer_calls.call(source, request, purpose="clone", timeout=60), source
            )
            data = bytes(reply["data"])
            node.store.put_raw(ns, data)
            node.initial_sync_status["approxTotalBytesCopied"] = Int64(
                int(node.initial_sync_status["approxTotalBytesCopied"]) + len(data)
            )
            await node.flush()
            if rate:
                await asyncio.sleep(len(data) / rate)
            if reply.get("done"):
                break
            position = int(reply["after"])
    # The clone saw a moving target; re-applying the oplog from `begin` makes it consistent.
    await _pull(node, source, begin, inclusive=True)
    while await _pull(node, source, node.last_applied, inclusive=False):
        pass
    node.set_meta("needs_initial_sync", False)
    await node.flush()
    node.needs_initial_sync = False
    node.initial_sync_status = None
    node.min_valid = NULL_OPTIME
    node.events.emit(
        "initial_sync_end", source=source, seconds=round(time.monotonic() - started, 3)
    )
    node.set_state(MemberState.RECOVERING, reason="initial sync done")


async def _pull(node: Node, source: str, after: OpTime, *, inclusive: bool) -> int:
    """Fetch and apply one batch without waiting; how many entries came."""
    reply = await node.peer_calls.call(
        source,
        _fetch_request(node, after, inclusive=inclusive, maxWaitMS=0),
        purpose="clone",
        timeout=30,
    )
    return apply_batch(node, _ok(reply, source).get("entries", []))


def _ok(reply: dict[str, Any], source: str) -> dict[str, Any]:
    """A sync source's answer, or PeerError: it cannot serve now, so syncing starts over."""
    if not reply.get("ok"):
        raise PeerError(f"{source}: {reply.get('errmsg', 'refused')}")
    return reply


def _require_sync_source(node: Node) -> None:
    if node.is_arbiter or node.state not in (MemberState.PRIMARY, MemberState.SECONDARY):
        raise CommandError(13436, f"cannot be a sync source in state {node.state.name}")


async def handle_sync_begin(node: Node, cmd: dict[str, Any]) -> dict[str, Any]:
    """rsdrillSyncBegin: where the source's oplog stands and what there is to clone."""
    _require_sync_source(node)
    names = node.store.namespaces()
    return {
        "lastApplied": node.last_applied.document(),
        "namespaces": names,
        "indexes": {ns: node.store.indexes(ns) for ns in names if node.store.indexes(ns)},
        "views": {ns: view for ns in names if (view := node.store.view(ns)) is not None},
        "options": {ns: options for ns in names if (options := node.store.options(ns))},
        "uuids": {ns: Binary.from_uuid(ui) for ns in names if (ui := node.store.uuid_of(ns))},
        "totalSize": Int64(node.store.approx_size()),
        "ok": 1.0,
    }


async def handle_clone(node: Node, cmd: dict[str, Any]) -> dict[str, Any]:
    """rsdrillClone: the next batch of a collection's documents after a position, as raw BSON
    (natural order; `after` is the position the previous batch ended at)."""
    _require_sync_source(node)
    docs, position, done = node.store.scan(
        cmd["rsdrillClone"], int(cmd.get("after", 0)), int(cmd.get("maxBytes", CLONE_BATCH_BYTES))
    )
    return {"data": Binary(b"".join(docs)), "after": Int64(position), "done": done, "ok": 1.0}


# -- rollback --------------------------------------------------------------------------------


async def rollback(node: Node, source: str) -> None:
    """Undo entries the source never had: save our versions of the documents, refetch theirs."""
    node.set_state(MemberState.ROLLBACK, reason=f"diverged from {source}")
    node.events.emit("rollback_start", source=source)
    common = await _common_point(node, source)
    if common is None:
        node.too_stale = True
        node.info_message = "cannot roll back: no common point with the sync source"
        node.set_state(MemberState.RECOVERING, reason="rollback impossible")
        node.events.emit("too_stale", source=source)
        return
    node.rbid += 1  # before any data changes, as mongod does: a reader comparing ids sees it
    node.set_meta("rbid", node.rbid)
    divergent = node.oplog.truncate_after(common)
    for entry in reversed(divergent):
        node.prepared.undone(entry)
    node.history.forget()  # documents change below without entries: older versions are lost
    touched: dict[tuple[str, Any], Any] = {}
    for entry in divergent:
        for ns, doc_id in changed_ids(entry):
            touched.setdefault((ns, id_key(doc_id)), (ns, doc_id))
    saved: dict[str, list[dict[str, Any]]] = {}
    for ns, doc_id in touched.values():
        ours = node.store.get(ns, doc_id)
        if ours is not None:
            saved.setdefault(ns, []).append(ours)
        reply = await node.peer_calls.call(
            source,
            {
                "find": ns.split(".", 1)[1],
                "filter": {"_id": doc_id},
                "limit": 1,
                "$readPreference": {"mode": "secondaryPreferred"},
            },
            purpose="rollback",
            timeout=30,
            db=ns.split(".", 1)[0],
        )
        theirs = (reply.get("cursor", {}).get("firstBatch") or [None])[0]
        if theirs is None:
            node.store.remove(ns, doc_id)
        else:
            node.store.put(ns, theirs)
    folders = {ns: str(ui) for ns in saved if (ui := node.store.uuid_of(ns)) is not None}
    files = _write_rollback_files(node.database.dbpath, saved, folders)
    status = _ok(
        await node.peer_calls.call(source, {"rsdrillSyncBegin": 1}, purpose="rollback", timeout=30),
        source,
    )
    node.min_valid = OpTime.from_doc(status["lastApplied"])
    node.set_meta("min_valid", node.min_valid.document())
    await node.flush()
    node.events.emit(
        "rollback_end",
        source=source,
        common_point=str(common),
        undone_entries=len(divergent),
        documents=sum(len(v) for v in saved.values()),
        files=[str(f) for f in files],
        # As mongod logs each rollback file with its collection's namespace and UUID.
        namespaces={str(f): ns for f, ns in files.items()},
    )
    node.set_state(MemberState.RECOVERING, reason="rollback done")


async def _common_point(node: Node, source: str) -> OpTime | None:
    keys = node.oplog.keys_newest_first()
    for start in range(0, len(keys), 1000):
        chunk = keys[start : start + 1000]
        reply = await node.peer_calls.call(
            source,
            {"rsdrillHasOplog": 1, "optimes": [k.document() for k in chunk]},
            purpose="rollback",
            timeout=30,
        )
        for key, present in zip(chunk, reply["present"], strict=True):
            if present:
                return key
    return None


def _write_rollback_files(
    dbpath: Path, saved: dict[str, list[dict[str, Any]]], folders: dict[str, str]
) -> dict[Path, str]:
    """`<dbpath>/rollback/<collection UUID>/removed.<time>.bson`, as mongod 4.4+ names them
    (`folders`: namespace → UUID; a collection without one is named by its namespace, as
    before 4.4)."""
    if os.environ.get(NO_ROLLBACK_FILES_ENV) == "1":  # planted (test-only): the data is lost
        return {}
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H-%M-%S.%f")
    paths = {}
    for ns, docs in saved.items():
        folder = dbpath / "rollback" / folders.get(ns, ns)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"removed.{stamp}.bson"
        path.write_bytes(b"".join(bson.encode(d) for d in docs))
        paths[path] = ns
    return paths
