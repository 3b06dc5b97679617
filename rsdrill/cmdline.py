"""This process's command line as others read it (/proc/PID/cmdline, ps), and writing it over.

A zygote, a process that forks children already imported instead of starting them afresh, is
started with blank room on its own command line. Each child writes the command it stands for
there, so a check that finds processes by their command line finds it as it would find the
process exec would have started.
"""

from __future__ import annotations

import ctypes
import os

from rsdrill.procstat import stat_fields

# proc(5) fields 48 and 49 (arg_start, arg_end), as indexes of stat_fields (from field 3 on).
_ARG_START, _ARG_END = 45, 46


class CommandLineRoom:
    """Where this process's command line lies in its memory, read once (the zygote's own)."""

    def __init__(self) -> None:
        fields = stat_fields(os.getpid())
        if fields is None or len(fields) <= _ARG_END:
            raise OSError("/proc/self/stat has no command-line addresses")
        self.start, self.end = int(fields[_ARG_START]), int(fields[_ARG_END])

    def encode(self, argv: list[str]) -> bytes:
        """`argv` as the room holds it; ValueError when it does not fit."""
        cmdline = b"\0".join(os.fsencode(a) for a in argv) + b"\0"
        if len(cmdline) > self.end - self.start:
            raise ValueError("command line longer than the room for it")
        return cmdline.ljust(self.end - self.start, b"\0")

    def write(self, encoded: bytes) -> None:
        """Write an `encode`d command line over this process's own (in a forked child)."""
        ctypes.memmove(self.start, encoded, self.end - self.start)
