"""The sandbox's own account of a run, from its members' event logs: what probes are checked
against (tests and benchmarks)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rsdrill.sandbox.config import EVENTS_FILE


def read_events(path: Path) -> list[dict[str, Any]]:
    """All events of one member's log, skipping a torn last line."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def all_events(sandbox_dir: Path) -> list[dict[str, Any]]:
    """Every member's events, merged in monotonic-time order."""
    merged = [
        event
        for path in sorted(sandbox_dir.glob(f"members/*/{EVENTS_FILE}"))
        for event in read_events(path)
    ]
    return sorted(merged, key=lambda e: e["t_mono"])


def first_after(
    sandbox_dir: Path,
    event: str,
    after_mono: float,
    *,
    member: str | None = None,
    other_than: str | None = None,
    **fields: Any,
) -> dict[str, Any] | None:
    """The first `event` after a monotonic time, optionally of/not of one member, matching
    the given fields (e.g. state="SECONDARY")."""
    for e in all_events(sandbox_dir):
        if e["t_mono"] <= after_mono or e["event"] != event:
            continue
        if member is not None and e["member"] != member:
            continue
        if other_than is not None and e["member"] == other_than:
            continue
        if all(e.get(k) == v for k, v in fields.items()):
            return e
    return None
