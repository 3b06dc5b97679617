"""Ground truth: each member appends what happened to it, with monotonic and wall-clock times.

Lines are JSON objects: `{"t_mono", "t_wall", "member", "event", ...}` (read by
rsdrill/sandbox/groundtruth.py). CLOCK_MONOTONIC is shared by all processes of one machine, so
probes and tests can line their own records up with these.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any


class EventLog:
    """Append-only JSON-lines file; each event is one write() so lines never interleave."""

    def __init__(self, path: Path, member: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.member = member

    def emit(self, event: str, **fields: Any) -> None:
        record = {
            "t_mono": time.monotonic(),
            "t_wall": time.time(),
            "member": self.member,
            "event": event,
            **fields,
        }
        os.write(self._fd, (json.dumps(record, default=str) + "\n").encode())
