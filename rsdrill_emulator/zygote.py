"""`python -m rsdrill_emulator.zygote FD ROOM`: forks members and routers, the emulator imported.

A member's imports (asyncio, bson, sqlite3, the emulator's own modules) cost it about 0.3 s of
CPU, more than anything else it does in a short run; a test suite starts over a thousand. This
process imports them once (a member's: a router forked from here imports its own package
itself) and forks a member per request on the socket FD (one end of a
socketpair held by the process that starts members: `rsdrill/sandbox/zygote.py`). Each child is
what `python -m rsdrill_emulator ARGS` would be: its own session, stdin from /dev/null, its
output appended to its log, the starter's environment, and the same command line, written
over this process's own (ROOM is blank room for it), so every check that reads /proc/PID/cmdline
finds the member's port and directory. The zygote exits when the socket closes: its starter is gone.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import traceback
from pathlib import Path
from typing import Any

from rsdrill.cmdline import CommandLineRoom
from rsdrill.sandbox.zygote import MODULE_ARGV
from rsdrill_emulator.__main__ import main

_ARGS_FROM = 1 + len(MODULE_ARGV)  # where a member's own arguments begin in its argv
READY = b"ready"
MAX_REQUEST_BYTES = 256 * 1024


def serve(channel: socket.socket) -> None:
    # Members that die are reaped by the kernel: no zombie waits for this process.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    room = CommandLineRoom()  # this process's own argv: where each child writes its command line
    channel.send(READY)
    while request := channel.recv(MAX_REQUEST_BYTES):
        try:
            reply: dict[str, Any] = {"pid": _fork(json.loads(request), channel, room)}
        except (OSError, ValueError, KeyError) as exc:
            reply = {"error": str(exc)}
        channel.send(json.dumps(reply).encode())


def _fork(request: dict[str, Any], channel: socket.socket, room: CommandLineRoom) -> int:
    argv = [str(a) for a in request["argv"]]
    if argv[1:_ARGS_FROM] != MODULE_ARGV:
        raise ValueError(f"not an emulator command: {argv[:_ARGS_FROM]}")
    cmdline = room.encode(argv)
    log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            channel.close()
            os.close(ready_r)
            _become(argv, room, cmdline, log, str(request["cwd"]))
            os.environ.clear()
            os.environ.update(request["env"])
            os.write(ready_w, b"1")
            os.close(ready_w)
            code = _run(argv[_ARGS_FROM:])
        finally:
            os._exit(code)
    os.close(log)
    os.close(ready_w)
    try:
        # Answer once the child carries its own command line (a check by port finds it).
        if os.read(ready_r, 1) != b"1":
            raise OSError(f"member process {pid} failed before it started")
    finally:
        os.close(ready_r)
    return pid


def _become(argv: list[str], room: CommandLineRoom, cmdline: bytes, log: int, cwd: str) -> None:
    """Set the forked child up as exec would have: session, signals, files, command line."""
    os.setsid()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(devnull)
    os.close(log)
    os.chdir(cwd)
    room.write(cmdline)
    sys.argv = [str(Path(sys.modules[main.__module__].__file__ or "")), *argv[_ARGS_FROM:]]


def _run(args: list[str]) -> int:
    try:
        main(args)
        return 0
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
        return 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


if __name__ == "__main__":
    serve(socket.socket(fileno=int(sys.argv[1])))
