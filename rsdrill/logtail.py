"""The end of a log file, to quote in an error: read from the end within a bound, so a member's
log of many gigabytes costs no time or memory, and with passwords masked."""

from __future__ import annotations

import os
from pathlib import Path

from rsdrill.redact import redact_uri

TAIL_BYTES = 16384


def tail_lines(path: Path, offset: int = 0, limit: int = TAIL_BYTES) -> list[str]:
    """The non-blank lines (right-stripped, passwords masked) of the last `limit` bytes
    written to `path` after `offset`, less a first line the limit cut; [] when it cannot
    be read."""
    try:
        with path.open("rb") as f:
            start = max(offset, f.seek(0, os.SEEK_END) - limit)
            # One byte before the limit tells whether its first line is whole (a newline).
            cut = start > offset
            f.seek(start - cut)
            data = f.read(limit + cut)  # bounded: a daemon may still be writing
    except OSError:
        return []
    if cut:
        # Dropped up to the first newline: a password cut from its URI's scheme would not be
        # masked, and half a line misleads.
        data = data.partition(b"\n")[2]
    text = redact_uri(data.decode(errors="replace"))
    return [line.rstrip() for line in text.splitlines() if line.strip()]


def last_line(path: Path) -> str:
    """The last non-blank line of `path`, stripped and masked; "" when there is none."""
    lines = tail_lines(path)
    return lines[-1].strip() if lines else ""
