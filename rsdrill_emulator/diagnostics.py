"""Diagnostic data capture, as mongod's FTDC keeps it in `<dbpath>/diagnostic.data/`: one JSON
line of the member's state per second, in files rotated at 10 MB, the oldest dropped beyond ten.

The member does not need these files to serve, so a failing disk (e.g. faultfs errors on
`diagnostic.data/*`) makes a sample fail and be logged (`diagnostics_error` ground-truth event),
never the member: the next sample is tried a second later. This is the kind of storage error a
server rides out.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rsdrill_emulator.node import Node

DIRECTORY = "diagnostic.data"
INTERVAL_S = 1.0
MAX_FILE_BYTES = 10 * 1024 * 1024
MAX_FILES = 10


def _sample(node: Node) -> str:
    return json.dumps({
        "t": time.time(), "state": node.state.name, "term": node.term,
        "applied": str(node.last_applied), "durable": str(node.last_durable),
        "commit_point": str(node.commit_point),
    })  # fmt: skip


def _write(directory: Path, line: str, current: Path | None) -> Path:
    """Append one sample; returns the file written (a new one when the last one is full)."""
    directory.mkdir(exist_ok=True)
    if current is None or not current.exists() or current.stat().st_size >= MAX_FILE_BYTES:
        current = directory / f"metrics.{time.time():.3f}"
        for old in sorted(directory.glob("metrics.*"))[: -(MAX_FILES - 1)]:
            old.unlink()
    with current.open("a") as out:
        out.write(line + "\n")
    return current


async def capture_loop(node: Node) -> None:
    """One sample per second, for as long as the member runs; failures are logged, not fatal."""
    directory = node.database.dbpath / DIRECTORY
    current: Path | None = None
    while True:
        await asyncio.sleep(INTERVAL_S)
        try:
            # On a thread, as FTDC has its own: a slow disk delays the sample, not the member.
            current = await asyncio.to_thread(_write, directory, _sample(node), current)
        except OSError as exc:
            current = None
            node.events.emit("diagnostics_error", error=str(exc))
