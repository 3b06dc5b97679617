"""Physical backup and restore of an emulator sandbox, as a disaster-recovery drill needs them.

A backup is a consistent copy of one data-bearing member's database file, taken while the set
runs (SQLite's online backup reads one snapshot; a secondary is preferred, as backup tools do).
A restore puts that copy on every data-bearing member's empty data directory and starts the
members, like a physical restore of a whole replica set: they come back with the backup's data
and oplog and elect a primary. Writes acknowledged after the backup's snapshot are lost: that
window is what the drill reports as its recovery point.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from rsdrill.sandbox.cluster import Sandbox, SandboxError
from rsdrill.sandbox.config import DATA_FILE, MemberSpec, member_dir
from rsdrill.sandbox.members import QUERY_TIMEOUT_S
from rsdrill.states import member_state

MANIFEST = "backup.json"


@dataclass(frozen=True)
class Backup:
    """Where a backup is, which member it was taken from, and when (UTC)."""

    path: Path
    source: str
    taken_at: str


def take_backup(sandbox: Sandbox, destination: Path) -> Backup:
    """Copy a running data member's database (a secondary if one runs) into `destination`."""
    _require_emulator(sandbox)
    running = [m for m in sandbox.spec.data_bearing if sandbox.pid(m) is not None]
    if not running:
        raise SandboxError("no data-bearing member is running: nothing to back up")
    options = sandbox.connect_options
    source = min(
        running,
        key=lambda m: member_state(m.host, QUERY_TIMEOUT_S, options=options) != "SECONDARY",
    )
    destination.mkdir(parents=True, exist_ok=True)
    target = destination / DATA_FILE
    target.unlink(missing_ok=True)
    src = sqlite3.connect(f"file:{_database(sandbox, source)}?mode=ro", uri=True, timeout=30)
    dst = sqlite3.connect(target)
    try:
        src.backup(dst)  # one snapshot of a database the member keeps writing
    except sqlite3.Error as exc:
        raise SandboxError(f"backup of {source.host} failed: {exc}") from exc
    finally:
        dst.close()
        src.close()
    backup = Backup(destination, source.host, dt.datetime.now(dt.UTC).isoformat())
    (destination / MANIFEST).write_text(
        json.dumps({"source": backup.source, "taken_at": backup.taken_at}) + "\n"
    )
    return backup


def restore_backup(sandbox: Sandbox, source: Path) -> list[str]:
    """Put the backup on every data-bearing member and start every member; the hosts started.

    Every member must be stopped first (a restore replaces the whole set's data).
    """
    _require_emulator(sandbox)
    if not (source / DATA_FILE).is_file():
        raise SandboxError(f"{source} holds no backup (no {DATA_FILE}): take one with "
                           "`rsdrill sandbox backup`")  # fmt: skip
    running = [m.host for m in sandbox.spec.members if sandbox.pid(m) is not None]
    if running:
        raise SandboxError(f"stop every member before a restore; running: {', '.join(running)}")
    for member in sandbox.spec.members:
        sandbox.wipe(member)
        if not member.arbiter_only:
            data = _database(sandbox, member)
            data.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source / DATA_FILE, data)
    started = []
    for member in sandbox.spec.members:
        sandbox.start(member)
        started.append(member.host)
    return started


def _database(sandbox: Sandbox, member: MemberSpec) -> Path:
    return member_dir(sandbox.directory, member) / "data" / DATA_FILE


def _require_emulator(sandbox: Sandbox) -> None:
    if sandbox.engine.name != "emulator":
        raise SandboxError(
            f"physical backup and restore are built in for the emulator engine, not "
            f"{sandbox.engine.name}: use mongodump/mongorestore or your backup tool"
        )
