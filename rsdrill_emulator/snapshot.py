"""Point-in-time reads: the documents as they were at an earlier oplog timestamp.

The data store holds only the newest version of each document. While some reader needs an older
one (a transaction reads from the snapshot taken at its first operation; a snapshot session reads
at `atClusterTime`), every applied oplog entry first leaves the document's previous version
(its pre-image) here, so the version current at any timestamp since recording began can be told:
the pre-image of the first change after that timestamp, or the stored document if none followed.
Recording stops when no one has asked for a snapshot for a while, so plain reads and writes pay
nothing for it.
"""

from __future__ import annotations

import time
from bisect import bisect_right
from collections import deque
from typing import TYPE_CHECKING, Any

from bson.timestamp import Timestamp

from rsdrill_emulator.datastore import id_key
from rsdrill_emulator.oplog import changed_ids, visible_at

if TYPE_CHECKING:
    from rsdrill_emulator.datastore import DataStore

Document = dict[str, Any]
# (seconds, increment) of an oplog timestamp: orders as MongoDB orders timestamps.
Stamp = tuple[int, int]

# How long pre-images are kept, and recording goes on after the last snapshot was asked for:
# MongoDB's transactionLifetimeLimitSeconds, after which a transaction is aborted anyway.
HISTORY_WINDOW_S = 60.0


def stamp(ts: Timestamp) -> Stamp:
    return (ts.time, ts.inc)


class SnapshotTooOld(Exception):
    """The history no longer (or not yet) reaches back to the asked timestamp."""


class SnapshotHistory:
    """Pre-images of the documents changed since recording began, by namespace and `_id`."""

    def __init__(self) -> None:
        # ns → id key → [(stamp of the change, the document before it or None)], oldest first.
        self._changes: dict[str, dict[bytes, list[tuple[Stamp, Document | None]]]] = {}
        # Every change in arrival order, to forget the old ones: (monotonic time, stamp, ns, key).
        self._arrivals: deque[tuple[float, Stamp, str, bytes]] = deque()
        self._wanted_until = 0.0
        # Reads at a timestamp older than this cannot be answered (a change is missing).
        self._complete_since: Stamp | None = None
        # The newest change applied (recording or not): reads at or after it, from when
        # recording begins, need no older version (a router's atClusterTime is often older
        # than the shard's newest entry, a no-op). None: unknown (a rollback, a restart).
        self._last_change: Stamp | None = None
        self._always = False

    def changed_at_most(self, ts: Timestamp) -> None:
        """Nothing changed after `ts` (the newest entry, when the member starts)."""
        self._last_change = stamp(ts)

    def keep_always(self, now: Timestamp) -> None:
        """Record from `now` on, whether asked or not: a shard's member, which a router asks
        to read at a cluster time the router chose (mongod keeps a history window always)."""
        self._always = True
        self.want(now)

    def want(self, now: Timestamp) -> None:
        """Someone reads from a snapshot: record (or go on recording) every change after `now`."""
        clock = time.monotonic()
        if self._complete_since is None or clock >= self._wanted_until:
            self._reset(stamp(now) if self._last_change is None else self._last_change)
        self._wanted_until = float("inf") if self._always else clock + HISTORY_WINDOW_S

    def forget(self) -> None:
        """The documents changed without oplog entries (rollback): no older version can be
        told any more."""
        self._reset(None)
        self._last_change = None

    def _reset(self, since: Stamp | None) -> None:
        self._changes.clear()
        self._arrivals.clear()
        self._complete_since = since

    def check(self, ts: Timestamp) -> None:
        """Raise SnapshotTooOld unless every change after `ts` is recorded."""
        self._forget_old()
        if self._complete_since is None or stamp(ts) < self._complete_since:
            raise SnapshotTooOld(f"Read timestamp {ts} is older than the oldest available one")

    def before_apply(self, entry: dict[str, Any], store: DataStore) -> None:
        """Called with each oplog entry just before the store applies it."""
        changed = changed_ids(entry)
        if not changed:
            return
        at = stamp(visible_at(entry))
        if self._last_change is not None:
            self._last_change = max(self._last_change, at)
        if self._complete_since is None:
            return
        clock = time.monotonic()
        if clock >= self._wanted_until:
            self._reset(None)
            return
        self._forget_old()
        for ns, doc_id in changed:
            key = id_key(doc_id)
            self._changes.setdefault(ns, {}).setdefault(key, []).append((at, store.get(ns, doc_id)))
            self._arrivals.append((clock, at, ns, key))

    def _forget_old(self) -> None:
        horizon = time.monotonic() - HISTORY_WINDOW_S
        while self._arrivals and self._arrivals[0][0] < horizon:
            _, at, ns, key = self._arrivals.popleft()
            versions = self._changes[ns][key]
            versions.pop(0)
            if not versions:
                del self._changes[ns][key]
            # Reading before a forgotten change would miss its pre-image.
            if self._complete_since is None or at > self._complete_since:
                self._complete_since = at

    def version_at(self, ns: str, key: bytes, ts: Stamp) -> tuple[bool, Document | None]:
        """(True, the document at `ts` or None if it did not exist) when it changed after `ts`;
        (False, None) when it did not, and the stored version is the one."""
        versions = self._changes.get(ns, {}).get(key)
        if not versions:
            return False, None
        i = bisect_right([at for at, _ in versions], ts)
        if i == len(versions):
            return False, None
        return True, versions[i][1]

    def changed_after(self, ns: str, key: bytes, ts: Stamp) -> bool:
        versions = self._changes.get(ns, {}).get(key)
        return bool(versions and versions[-1][0] > ts)

    def keys_changed_after(self, ns: str, ts: Stamp) -> list[bytes]:
        return [k for k, v in self._changes.get(ns, {}).items() if v[-1][0] > ts]


class SnapshotView:
    """The reads a `DataStore` answers, as of timestamp `at`, with a transaction's own changes
    (`own`: ns → id key → document, None where it deleted one) laid over them."""

    def __init__(
        self,
        store: DataStore,
        history: SnapshotHistory,
        at: Timestamp,
        own: dict[str, dict[bytes, Document | None]] | None = None,
        created: set[str] | None = None,
    ) -> None:
        self._store = store
        self._history = history
        self._at = stamp(at)
        self._own = own if own is not None else {}
        self._created = created if created is not None else set()

    def get(self, ns: str, doc_id: Any) -> Document | None:
        key = id_key(doc_id)
        mine = self._own.get(ns, {})
        if key in mine:
            return mine[key]
        changed, before = self._history.version_at(ns, key, self._at)
        return before if changed else self._store.get(ns, doc_id)

    def documents(self, ns: str) -> list[Document]:
        # Documents changed after the snapshot are replaced by their version at it; those
        # deleted since come back at the end (natural order is not kept for them).
        changed = {k: self._history.version_at(ns, k, self._at)[1]
                   for k in self._history.keys_changed_after(ns, self._at)}  # fmt: skip
        mine = self._own.get(ns, {})
        out: list[Document] = []
        seen: set[bytes] = set()
        for doc in self._store.documents(ns):
            key = id_key(doc["_id"])
            seen.add(key)
            if key in mine:
                current = mine[key]
            elif key in changed:
                current = changed[key]
            else:
                current = doc
            if current is not None:
                out.append(current)
        for key, before in changed.items():
            if key not in seen and key not in mine and before is not None:
                out.append(before)
                seen.add(key)
        out.extend(doc for key, doc in mine.items() if key not in seen and doc is not None)
        return out

    def count(self, ns: str) -> int:
        return len(self.documents(ns))

    def exists(self, ns: str) -> bool:
        return ns in self._created or ns in self._own or self._store.exists(ns)

    def __getattr__(self, name: str) -> Any:
        # Anything else a command asks of the store (the catalog, sizes, the session table) is
        # not versioned: the current store answers it.
        return getattr(self._store, name)
