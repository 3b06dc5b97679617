"""A process's /proc/PID/stat line, read by the parts of rsdrill that watch processes."""

from __future__ import annotations

import os
from pathlib import Path


def stat_fields(pid: int) -> list[str] | None:
    """The fields after the command name (state first, as in proc(5) from field 3 on), or None
    when there is no such process. The name is skipped by its last `)`: it may hold spaces."""
    return _fields(Path(f"/proc/{pid}/stat"))


def cpu_seconds(pid: int) -> float | None:
    """User and system CPU seconds process `pid` has used, all its threads (proc(5) utime and
    stime), or None when there is no such process."""
    fields = stat_fields(pid)
    return None if fields is None else fields_cpu_seconds(fields)


def fields_cpu_seconds(fields: list[str]) -> float:
    """User and system CPU seconds from a `stat_fields` reading."""
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def live_thread_state(pid: int) -> str | None:
    """The state of a thread of process `pid` that has not ended, or None when none is left: a
    process whose main thread ended is a zombie while its other threads still run, and holds
    its files (sockets too) until the last one ends."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return None
    for task in tasks:
        fields = _fields(task / "stat")
        if fields and fields[0] not in ("Z", "X"):
            return fields[0]
    return None


def _fields(stat: Path) -> list[str] | None:
    try:
        return stat.read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
