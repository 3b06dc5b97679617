"""The fault journal: what a run is about to break, written (and fsynced) before it breaks it.

One JSON-lines file per run under `$RSDRILL_HOME/journal/` (default `~/.rsdrill/journal`).
Records: `run` (who and when), `intent` (a fault about to be applied, with its revert action),
`applied`, `reverted`, `resource` (something the run set up that must be released, e.g. its
sandbox), `released`, `forgotten` (a revert given up by hand, `by` whom: `rsdrill recover
--forget`), and `end` when nothing is left to undo. A journal without `end` whose process is
gone is what `rsdrill recover` finishes.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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


class Journal:
    """The journal of one run; every record is on disk before the call returns."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    @classmethod
    def open_run(cls, run_id: str, experiment: str, directory: Path | None = None) -> Journal:
        journal = cls((directory or journal_dir()) / f"{run_id}.jsonl")
        journal.write("run", run=run_id, experiment=experiment, pid=os.getpid())
        return journal

    def write(self, record_type: str, **fields: Any) -> None:
        record = {"type": record_type, "at": dt.datetime.now(dt.UTC).isoformat(), **fields}
        # A start command or an error may hold a URI; its password never reaches the disk.
        os.write(self._fd, (redact_uri(json.dumps(record, default=str)) + "\n").encode())
        os.fsync(self._fd)

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


def pending(directory: Path | None = None) -> list[Pending]:
    """Every journal without an `end`, with the actions that would finish it."""
    out = []
    for path in journal_paths(directory):
        records = read_records(path)
        if any(r["type"] == "end" for r in records):
            continue
        head = next((r for r in records if r["type"] == "run"), {})
        out.append(
            Pending(path, head.get("run", path.stem), head.get("experiment", "?"),
                    head.get("pid"), actions=owed_actions(records))
        )  # fmt: skip
    return out


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
