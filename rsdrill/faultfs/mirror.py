"""The backing of a mount: one directory, or a mirror of two (replicas a and b), as vSAN with
FTT=1 keeps two copies of each component.

Every change goes to each replica in sync; reads come from the first one in sync. A replica
whose operation fails (a rule naming it, or its own error) while the other's succeeds is
marked degraded and left alone from then on: the mount serves from the other, the caller sees
no error. Once no rule names a degraded replica any more, it is resynced from the one in sync
in the background (`resync.py`): the whole tree, then what changed meanwhile (the byte ranges
written, whole paths for other changes), then, with changes held for a moment, the rest; the
time it took, what it copied and how long changes were held are recorded. With one
directory, an operation's error is the caller's.

The replicas' states are kept in a file next to the mount's state, so that a replica left
out of sync by a crash is resynced at the next mount, or offline by `resync_offline`.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from rsdrill.faultfs.resync import Copied, Spans, sync_changes, sync_path, sync_tree
from rsdrill.faultfs.state import FaultState

MIRROR_FILE = "faultfs-mirror.json"
IN_SYNC, DEGRADED, RESYNCING = "in-sync", "degraded", "resyncing"
# Copy passes while changes go on, before the last one that holds them: each copies only what
# changed during the one before, so they shrink fast unless the writes outpace the copy.
_LIVE_PASSES = 5

T = TypeVar("T")


@dataclass
class Replica:
    """One backing directory: its descriptor (None when given none) and what happened to it."""

    name: str | None
    root: int
    path: str
    state: str = IN_SYNC
    degraded_at: float | None = None
    error: str | None = None
    failed_operations: int = 0
    resyncs: list[dict[str, Any]] = field(default_factory=list)

    def report(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k not in ("name", "root")}


@dataclass
class _Handle:
    path: str
    flags: int
    fds: dict[str | None, int]


class _Gate:
    """Changes pass together; the last resync pass holds them all back for its duration."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._changing = 0
        self._held = False

    @contextlib.contextmanager
    def change(self) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: not self._held)
            self._changing += 1
        try:
            yield
        finally:
            with self._cond:
                self._changing -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        with self._cond:
            self._held = True
            self._cond.wait_for(lambda: self._changing == 0)
        try:
            yield
        finally:
            with self._cond:
                self._held = False
                self._cond.notify_all()


class Backing:
    """The directories a mount serves: `roots` maps each replica's name (None for a mount with
    one directory) to its root descriptor; `paths` says where they are (for the record)."""

    def __init__(self, roots: dict[str | None, int], paths: dict[str | None, str],
                 state: FaultState, record: Path | None = None) -> None:  # fmt: skip
        self.replicas = [Replica(name, fd, paths[name]) for name, fd in roots.items()]
        self.state = state
        self.record = record
        self.gate = _Gate()
        self._lock = threading.Lock()
        # Saves one at a time: each writes the state as of its own snapshot, the newest last.
        self._save_lock = threading.Lock()
        self._handles: dict[int, _Handle] = {}
        self._dirty: dict[str, Spans] | None = None  # what changed while a resync copies
        self._resyncing: threading.Thread | None = None
        if record is not None and record.exists():
            saved = json.loads(record.read_text()).get("replicas", {})
            for replica in self.replicas:
                if saved.get(replica.name, {}).get("state", IN_SYNC) != IN_SYNC:
                    replica.state = DEGRADED  # left out of sync before this mount: resync it
                    replica.error = "out of sync when mounted"
        self._save()
        self.rules_changed()

    @property
    def mirrored(self) -> bool:
        return len(self.replicas) > 1

    def _in_sync(self) -> list[Replica]:
        with self._lock:
            return [r for r in self.replicas if r.state == IN_SYNC]

    # -- the operations ----------------------------------------------------------------------

    def look(self, fn: Callable[[int], T]) -> T:
        """A read of metadata, from the first replica in sync (metadata is never faulted)."""
        return fn(self._first().root)

    def _first(self) -> Replica:
        in_sync = self._in_sync()
        if not in_sync:
            raise OSError(5, "no replica of the mirror is in sync")
        return in_sync[0]

    def change(self, paths: tuple[str, ...], fn: Callable[[int], T]) -> T:
        """A change of the tree (`fn(root)`), made in each replica in sync."""
        with self.gate.change():
            result = self._each(None, paths, 0, [(r, r.root) for r in self._in_sync()], fn)
            self._mark(paths)
            return result

    def open(self, rel: str, flags: int, operation: str, fn: Callable[[int], int]) -> int:
        """Open (or create) `rel` in each replica in sync (`fn(root)` → descriptor); the
        handle is the first replica's descriptor."""
        fds: dict[str | None, int] = {}

        def opened(replica_root: tuple[Replica, int]) -> int:
            replica, root = replica_root
            fds[replica.name] = fn(root)
            return fds[replica.name]

        with self.gate.change():
            targets = [(r, (r, r.root)) for r in self._in_sync()]
            fh = self._each(operation, (rel,), 0, targets, opened)
            if flags & (os.O_CREAT | os.O_TRUNC):
                self._mark((rel,))
            with self._lock:
                self._handles[fh] = _Handle(rel, flags, fds)
        return fh

    def read(self, fh: int, rel: str, nbytes: int, fn: Callable[[int], T]) -> T:
        """A read through an open file, from the first replica in sync that answers (those
        that failed before it are degraded)."""
        failed: list[tuple[Replica, OSError]] = []
        for replica, fd in self._targets(fh):
            try:
                self._admit(replica, "read", rel, nbytes)
                result = fn(fd)
            except OSError as exc:
                failed.append((replica, exc))
                continue
            for degraded, error in failed:
                self._degrade(degraded, error)
            return result
        raise failed[0][1] if failed else OSError(5, "no replica of the mirror is in sync")

    def write(self, fh: int, operation: str, rel: str, span: tuple[int, int] | None,
              fn: Callable[[int], T]) -> T:  # fmt: skip
        """A change through an open file in each replica in sync: the bytes of `span` (start,
        end) written, or (None) nothing changed but their durability (fsync)."""
        with self.gate.change():
            nbytes = 0 if span is None else span[1] - span[0]
            result = self._each(operation, (), nbytes, self._targets(fh), fn, rel)
            if span is not None:
                self._mark((rel,), span)
            return result

    def renamed(self, old: str, new: str) -> None:
        with self._lock:
            prefix = old + "/"
            for handle in self._handles.values():
                if handle.path == old or handle.path.startswith(prefix):
                    handle.path = new + handle.path[len(old) :]

    def path(self, fh: int, default: str) -> str:
        with self._lock:
            handle = self._handles.get(fh)
        return default if handle is None else handle.path

    def release(self, fh: int) -> None:
        with self._lock:
            handle = self._handles.pop(fh, None)
        for fd in {fh, *(handle.fds.values() if handle else ())}:
            with contextlib.suppress(OSError):
                os.close(fd)

    def _targets(self, fh: int) -> list[tuple[Replica, int]]:
        with self._lock:
            handle = self._handles.get(fh)
            fds: dict[str | None, int] = {None: fh} if handle is None else dict(handle.fds)
        return [(r, fds[r.name]) for r in self._in_sync() if r.name in fds]

    def _admit(self, replica: Replica, operation: str | None, rel: str, nbytes: int) -> None:
        if operation is None or replica.name is None:
            return
        failure = self.state.admit(operation, rel, nbytes, replica=replica.name)
        if failure is not None:
            raise OSError(failure, os.strerror(failure))

    def _mark(self, paths: tuple[str, ...], span: tuple[int, int] | None = None) -> None:
        """While a resync copies: what a change touched, a byte range of a file or (None)
        whole paths."""
        with self._lock:
            if self._dirty is None:
                return
            for path in paths:
                spans = self._dirty.setdefault(path, [] if span else None)
                if spans is not None and span is not None:
                    spans.append(span)
                elif span is None:
                    self._dirty[path] = None

    def _each(self, operation: str | None, paths: tuple[str, ...], nbytes: int,
              targets: list[tuple[Replica, Any]], fn: Callable[[Any], T],
              rel: str | None = None) -> T:  # fmt: skip
        """`fn` on each target; the first success (the failed replicas degraded), or the
        first error when every one failed (the operation's own error, the caller's)."""
        results: list[tuple[Replica, T | OSError]] = []
        for replica, arg in targets:
            try:
                self._admit(replica, operation, rel or paths[0], nbytes)
                results.append((replica, fn(arg)))
            except OSError as exc:
                results.append((replica, exc))
        done = [value for _, value in results if not isinstance(value, OSError)]
        if not done:
            if not results:
                raise OSError(5, "no replica of the mirror is in sync")
            failure = results[0][1]
            assert isinstance(failure, OSError)
            raise failure
        for replica, value in results:
            if isinstance(value, OSError):
                self._degrade(replica, value)
        return done[0]

    # -- degrading and resyncing ---------------------------------------------------------------

    def _degrade(self, replica: Replica, exc: OSError) -> None:
        with self._lock:
            replica.failed_operations += 1
            if replica.state != IN_SYNC:
                return
            replica.state, replica.degraded_at = DEGRADED, time.time()
            replica.error = f"{exc.strerror or exc}"
        self._save()

    def rules_changed(self) -> None:
        """Start resyncing a degraded replica that no rule names any more (one at a time)."""
        named = self.state.replicas_named()
        with self._lock:
            running = self._resyncing
            if (
                running is not None
                and running.is_alive()
                and running is not threading.current_thread()
            ):
                return
            due = [r for r in self.replicas if r.state == DEGRADED and r.name not in named]
            if not due or not any(r.state == IN_SYNC for r in self.replicas):
                return
            self._resyncing = threading.Thread(target=self._resync, args=(due[0],),
                                               name="faultfs-resync", daemon=True)  # fmt: skip
            self._resyncing.start()

    def _resync(self, replica: Replica) -> None:
        source = self._first()
        started = time.monotonic()
        copied = Copied()
        with self._lock:
            replica.state, self._dirty = RESYNCING, {}
        self._save()
        try:
            sync_path(source.root, replica.root, ".", copied)
            for _ in range(_LIVE_PASSES):
                with self._lock:
                    dirty, self._dirty = self._dirty or {}, {}
                if not dirty:
                    break
                sync_changes(source.root, replica.root, dirty, copied)
            with self.gate.hold():
                held = time.monotonic()
                with self._lock:
                    dirty, self._dirty = self._dirty or {}, None
                sync_changes(source.root, replica.root, dirty, copied)
                self._reopen(replica, source)
                with self._lock:
                    replica.state = IN_SYNC
                    replica.resyncs.append({
                        "from": source.name, "seconds": round(time.monotonic() - started, 4),
                        "held_s": round(time.monotonic() - held, 4), **asdict(copied),
                    })  # fmt: skip
        except OSError as exc:  # the replica still fails: it stays degraded
            with self._lock:
                replica.state, self._dirty = DEGRADED, None
                replica.error = f"resync: {exc.strerror or exc}"
        self._save()
        self.rules_changed()

    def _reopen(self, replica: Replica, source: Replica) -> None:
        """Give every open file a descriptor on the resynced replica, if its file is still at
        its path (one removed or replaced since is served by the source only)."""
        with self._lock:
            handles = list(self._handles.items())
        for fh, handle in handles:
            old = handle.fds.pop(replica.name, None)
            if old is not None and old != fh:
                os.close(old)
            source_fd = handle.fds.get(source.name)
            if source_fd is None:
                continue
            try:
                opened = os.fstat(source_fd)
                there = os.stat(handle.path, dir_fd=source.root, follow_symlinks=False)
            except OSError:
                continue
            if (opened.st_dev, opened.st_ino) == (there.st_dev, there.st_ino):
                flags = handle.flags & ~(os.O_CREAT | os.O_EXCL | os.O_TRUNC | os.O_DIRECT)
                handle.fds[replica.name] = os.open(handle.path, flags, dir_fd=replica.root)

    def snapshot(self) -> dict[str, Any]:
        """Each replica's state, for `status`."""
        with self._lock:
            return {str(r.name): r.report() for r in self.replicas}

    def _save(self) -> None:
        if self.record is None or not self.mirrored:
            return
        # The resync thread and the control thread both save: two writes into one temporary
        # file left a record with another's tail after its end, which recover could not read.
        with self._save_lock:
            _write_record(self.record, self.snapshot())


def _write_record(record: Path, replicas: dict[str, Any]) -> None:
    """The record replaced whole (a reader sees the old one or the new one)."""
    text = json.dumps({"replicas": replicas}, indent=2) + "\n"
    temporary = record.with_name(f".{record.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    temporary.write_text(text)
    os.replace(temporary, record)


def resync_offline(record: Path) -> list[str]:
    """Resync, from one in sync, the replicas a mirror's record says are not (its mount gone):
    what was done."""
    if not record.exists():
        return []
    replicas: dict[str, dict[str, Any]] = json.loads(record.read_text())["replicas"]
    sources = [name for name, r in replicas.items() if r["state"] == IN_SYNC]
    done = []
    for name, replica in replicas.items():
        if replica["state"] == IN_SYNC or not sources:
            continue
        started = time.monotonic()
        copied = sync_tree(replicas[sources[0]]["path"], replica["path"])
        replica["state"] = IN_SYNC
        replica["resyncs"].append({"from": sources[0], "offline": True,
                                   "seconds": round(time.monotonic() - started, 4),
                                   **asdict(copied)})  # fmt: skip
        done.append(f"replica {name} resynced from {sources[0]} ({copied.bytes} bytes)")
    _write_record(record, replicas)
    return done
