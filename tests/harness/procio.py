"""What this process has read, as the kernel counts it (/proc/self/io): tests that a read is
bounded or cached."""

from __future__ import annotations

from pathlib import Path


def io_counter(name: str) -> int:
    """One counter of /proc/self/io: `rchar` the bytes read calls returned, `syscr` the calls."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith(f"{name}:"):
            return int(line.split()[1])
    raise AssertionError(f"no {name} in /proc/self/io")
