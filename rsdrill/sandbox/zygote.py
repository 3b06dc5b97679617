"""Emulator members forked from a parent that has imported the emulator already.

Each process that starts members (the CLI, a run, a test worker) gets one such parent, the
zygote (`rsdrill_emulator/zygote.py`), on the first start, over a private socketpair: nobody
else can ask it for anything, and it exits when this process does. A member forked from it is
the process `python -P -m rsdrill_emulator ...` would be (own session, command line, log), without
paying its imports again. The member gets this process's environment as it is at the start;
where a difference from the zygote's would have acted while Python started (PYTHON*, LD_*,
locale, TZ), or the zygote cannot serve a start (another interpreter, it died), the caller
starts the member as before.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

from rsdrill.environ import environ_copy

# -P: nothing in the directory rsdrill runs in shadows what a member imports (a `uvloop.py`
# there would otherwise be the members' uvloop).
MODULE_ARGV = ["-P", "-m", "rsdrill_emulator"]
# Blank room on the zygote's command line, written over with each child's own.
ROOM_BYTES = 4096
MAX_REQUEST_BYTES = 256 * 1024  # as the zygote reads them
# Read as Python and the C library start, before a forked member could be told otherwise.
READ_AT_START = ("PYTHON", "LD_", "LC_", "LANG", "TZ")
READY_TIMEOUT_S = 30.0
# A fork answers in milliseconds; on a saturated machine it can take seconds, and a zygote given
# up on while its child is still setting up could leave that child to start beside the next.
REPLY_TIMEOUT_S = 30.0


def starts_alike(
    ours: dict[str, str], theirs: dict[str, str], read_at_start: tuple[str, ...] = READ_AT_START
) -> bool:
    """Whether two environments agree on every variable whose name begins with one of
    `read_at_start`: those act as a process starts, so a child forked from a process started in
    `ours` is not the one exec would start in `theirs` where they differ."""
    changed = {k for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k)}
    return not any(name.startswith(read_at_start) for name in changed)


class _Refused(Exception):
    """The zygote could not fork this one (its command line too long, a log it cannot open)."""


class _Zygote:
    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.environ = environ_copy()
        self.process = subprocess.Popen(
            [sys.executable, "-P", "-m", "rsdrill_emulator.zygote", str(theirs.fileno()),
             " " * ROOM_BYTES],
            pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        theirs.close()
        self.channel = ours
        self.owner = os.getpid()
        try:
            self.channel.settimeout(READY_TIMEOUT_S)
            if self.channel.recv(64) != b"ready":
                raise OSError("the zygote did not start")
            self.channel.settimeout(REPLY_TIMEOUT_S)
        except OSError:
            self.close()
            raise

    def serves(self, environ: dict[str, str]) -> bool:
        """Whether a member forked from here would run as one started in `environ`."""
        return starts_alike(self.environ, environ)

    def fork(self, argv: list[str], log_path: Path, environ: dict[str, str]) -> int:
        request = {"argv": argv, "log": str(log_path), "cwd": os.getcwd(), "env": environ}
        message = json.dumps(request).encode()
        if len(message) > MAX_REQUEST_BYTES:
            raise _Refused("request too large")
        self.channel.send(message)
        answer = self.channel.recv(65536)
        if not answer:
            raise OSError("the zygote closed")
        reply = json.loads(answer)
        if "pid" not in reply:
            raise _Refused(reply.get("error"))
        return int(reply["pid"])

    def close(self) -> None:
        self.channel.close()
        self.process.kill()
        self.process.wait()


_lock = threading.Lock()
_zygote: _Zygote | None = None
_broken = False  # its start failed once: this process starts members itself from then on


def fork_member(argv: list[str], log_path: Path) -> int | None:
    """The pid of the member `argv` forked from this process's zygote, or None when the caller
    must start it itself (not an emulator command of this interpreter, an environment that
    differs from the zygote's where Python reads it at start, no zygote to be had)."""
    global _zygote, _broken
    if argv[0] != sys.executable or argv[1 : 1 + len(MODULE_ARGV)] != MODULE_ARGV:
        return None
    with _lock:
        if _zygote is not None and _zygote.owner != os.getpid():
            # Inherited across a fork: the zygote is the parent's; only our copy of the socket
            # goes (kept, it would hold the zygote up after the parent exits).
            _zygote.channel.close()
            _zygote = None
        for _ in range(2):  # a zygote found dead is replaced once
            if _zygote is None and not _broken:
                try:
                    _zygote = _Zygote()
                except OSError:
                    _broken = True
            environ = environ_copy()
            if _zygote is None or not _zygote.serves(environ):
                return None
            try:
                return _zygote.fork(argv, log_path, environ)
            except _Refused:
                return None
            except (OSError, ValueError):
                _zygote.close()  # dead or garbled
                _zygote = None
        return None
