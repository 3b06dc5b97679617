"""The fault journal: what a run is about to break, written (and fsynced) before it breaks it.

One JSON-lines file per run under `$RSDRILL_HOME/journal/` (default `~/.rsdrill/journal`).
Records: `run` (who and when), `intent` (a fault about to be applied, with its revert action),
`applied`, `reverted`, `resource` (something the run set up that must be released, e.g. its
sandbox), `released`, `forgotten` (a revert given up by hand, `by` whom: `rsdrill recover
--forget`), and `end` when nothing is left to undo. A journal without `end` whose process is
gone is what `rsdrill recover` finishes.

A recover and a forget each hold the journal's lock (`Journal.lock`, flock on the file itself)
from reading what it owes to their last record, so two of them, run at once on one journal,
never both decide from what they read before the other wrote (two `end` records, a revert
carried out twice, or one given up while it was being reverted).
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rsdrill.errors import InjectionError
from rsdrill.home import rsdrill_home
from rsdrill.redact import redact_uri

FORGOTTEN = "forgotten"
# The records after which a key is no longer owed.
SETTLED = ("reverted", "released", FORGOTTEN)


def journal_dir() -> Path:
    return rsdrill_home() / "journal"


def journal_paths(directory: Path | None = None) -> list[Path]:
    """Every run's journal, oldest first (run ids begin with their UTC start time)."""
    directory = directory or journal_dir()
    return sorted(directory.glob("*.jsonl")) if directory.exists() else []


class JournalBusy(Exception):
    """Another recover or forget held the journal's lock for as long as this one would wait."""

    def __init__(self, path: Path, waited_s: float) -> None:
        super().__init__(f"{path}: another rsdrill recover holds it (waited {waited_s:.1f}s)")
        self.path = path
        self.waited_s = waited_s


class JournalEnded(InjectionError):
    """The run's journal was ended by another process (`rsdrill recover --force`): what it owed
    is reverted, and the run injects nothing more."""

    def __init__(self, path: Path) -> None:
        super().__init__(
            f"{path.name} was finished by `rsdrill recover --force` while this run went on: "
            "it injects nothing more (what it had in force is reverted again)"
        )


# The records after which the run puts a fault in force or holds a resource: each first looks
# whether a recover ended the journal (`Journal.open_run`).
_OWING = frozenset({"intent", "applied", "resource"})


class Journal:
    """The journal of one run; every record is on disk before the call returns."""

    def __init__(self, path: Path, create: bool = True) -> None:
        """`create=False`: only a journal that exists (recover's and forget's; OSError else)."""
        if create:
            path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | (os.O_CREAT if create else 0), 0o600)
        self._guarded = False
        self._size = 0  # what this process wrote: the file grown past it, another wrote too
        self.ended_by_other = False

    @classmethod
    def open_run(cls, run_id: str, experiment: str, directory: Path | None = None) -> Journal:
        path = (directory or journal_dir()) / f"{run_id}.jsonl"
        # Written under another name and renamed into place: a journal is never seen without
        # its `run` record. Read empty, it was a dead run's (no pid), and a recover at that
        # moment ended it: the run's faults then went in after its `end`, out of recover's reach.
        journal = cls(path.with_name(f".{path.name}.new"))
        journal.write("run", run=run_id, experiment=experiment, pid=os.getpid())
        os.rename(journal.path, path)
        journal.path = path
        # A recover --force may finish the journal while the run goes on (hung, stopped, in
        # another pid namespace): each record that puts something in force waits for a recover
        # holding the lock, then looks for its `end` (`write`).
        journal._guarded = True
        # The name, durable as the records are: a journal lost with a power cut is a fault no
        # recover finds.
        directory_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(directory_fd)
        finally:
            os.close(directory_fd)
        return journal

    def lock(self, wait_s: float, say: Callable[[str], None]) -> bool:
        """Hold the journal's exclusive lock until `close` (or the process's end, however it
        ends: the kernel drops a flock with its last descriptor, so a crash leaves none).
        Held by another: `say` so once and retry, up to `wait_s`, then JournalBusy. A
        filesystem that cannot lock (NFS without its lock manager): `say` so and go on
        unlocked, as every recover did before there was a lock, rather than leave the faults
        in force. The lock is on the journal itself: no file of its own to leave behind. A
        live run takes it only while it writes a record (`write`): a hung one holds nothing,
        and `recover --force` can finish its journal. False: the filesystem cannot lock."""
        deadline = time.monotonic() + wait_s
        told = False
        while True:
            try:
                # On the write descriptor: over NFS an exclusive flock needs one.
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                pass
            except OSError as exc:
                say(f"cannot lock {self.path} ({exc.strerror or exc}): going on without the "
                    "lock; run no other recover on it meanwhile")  # fmt: skip
                return False
            left = deadline - time.monotonic()
            if left <= 0:
                raise JournalBusy(self.path, wait_s)
            if not told:
                say(
                    f"{self.path}: another rsdrill recover holds it; waiting up to "
                    f"{round(wait_s, 1):g}s"
                )
                told = True
            time.sleep(min(0.05, left))

    def write(self, record_type: str, **fields: Any) -> None:
        """Append and fsync one record. A run's journal (`open_run`) ended by another process:
        JournalEnded instead of a record that would put something in force, and from then
        on every record is written unchecked (the run's own reverts and `end`)."""
        record = {"type": record_type, "at": dt.datetime.now(dt.UTC).isoformat(), **fields}
        # A start command or an error may hold a URI; its password never reaches the disk.
        line = (redact_uri(json.dumps(record, default=str)) + "\n").encode()
        if not self._guarded or self.ended_by_other or record_type not in _OWING:
            self._append(line)
            return
        # However long a recover holds it: its reverts decide what this run may do next.
        locked = self.lock(math.inf, lambda _line: None)
        try:
            if self._ended_elsewhere():
                self.ended_by_other = True
                raise JournalEnded(self.path)
            self._append(line)
        finally:
            if locked:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _append(self, line: bytes) -> None:
        os.write(self._fd, line)
        os.fsync(self._fd)
        self._size += len(line)

    def _ended_elsewhere(self) -> bool:
        size = os.fstat(self._fd).st_size
        if size == self._size:  # nobody else wrote: the common case costs one fstat
            return False
        self._size = size
        return any(r["type"] == "end" for r in read_records(self.path))

    def close(self) -> None:
        os.close(self._fd)


@dataclass
class Pending:
    """What one unfinished journal still owes: revert actions, latest first."""

    path: Path
    run: str
    experiment: str
    pid: int | None
    actions: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


def read_records(path: Path) -> list[dict[str, Any]]:
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a torn last line: the write it described never completed
    return records


def owed_actions(records: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """The revert actions `records` leave owed, in the order to carry them out."""
    owed: dict[str, dict[str, Any]] = {}
    for r in records:
        if r["type"] in ("intent", "resource") and r.get("revert"):
            owed[r["key"]] = r["revert"]
        elif r["type"] in SETTLED:
            owed.pop(r["key"], None)
    # Faults before resources (restart the member, then stop the sandbox), latest first.
    faults = [(k, a) for k, a in owed.items() if not k.startswith("resource:")]
    resources = [(k, a) for k, a in owed.items() if k.startswith("resource:")]
    return faults[::-1] + resources[::-1]


def unfinished(path: Path) -> Pending | None:
    """What the journal at `path` still owes; None once it has its `end`."""
    records = read_records(path)
    if any(r["type"] == "end" for r in records):
        return None
    head = next((r for r in records if r["type"] == "run"), {})
    return Pending(path, head.get("run", path.stem), head.get("experiment", "?"),
                   head.get("pid"), actions=owed_actions(records))  # fmt: skip


def pending(directory: Path | None = None) -> list[Pending]:
    """Every journal without an `end`, with the actions that would finish it."""
    return [p for path in journal_paths(directory) if (p := unfinished(path)) is not None]


def process_alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    return not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
