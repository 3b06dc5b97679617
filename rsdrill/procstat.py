"""A process's /proc/PID/stat line, read by the parts of rsdrill that watch processes."""

from __future__ import annotations

from pathlib import Path


def stat_fields(pid: int) -> list[str] | None:
    """The fields after the command name (state first, as in proc(5) from field 3 on), or None
    when there is no such process. The name is skipped by its last `)`: it may hold spaces."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()
