"""`python -m tests.harness.cli_zygote FD ROOM`: `python -m rsdrill.cli` forked, imports made once.

The suite starts ~500 rsdrill processes, and each spent 0.5-1 s of CPU on its imports (typer,
the models, pymongo, NumPy) before doing anything. This process imports them once, then forks
a child per request on the socket FD (tests/harness/cli.py holds the other end). The child is
what `python -m rsdrill.cli ARGS` would be: its own pid; the caller's stdin, stdout, stderr,
environment and working directory; its own session or group if asked; its command line written
over ROOM. It runs the command as `__main__` and ends through the interpreter's own exit
(SystemExit, an uncaught exception's traceback, KeyboardInterrupt's SIGINT, threads joined,
atexit handlers). Each child's wait status goes back over the socket its request came with; the
zygote exits when FD closes.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import runpy
import selectors
import signal
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, PydanticUndefinedAnnotation

from rsdrill.cmdline import CommandLineRoom

READY = b"ready"
MAX_REQUEST_BYTES = 256 * 1024
# The modules `rsdrill run`, `recover`, `validate` and `sandbox` import (measured: a run of a
# sandbox experiment ends with ~780 loaded). One that fails to import is left to the child,
# which fails as a fresh process would.
PRELOAD = (
    "rsdrill.cli.entry", "rsdrill.cli.app", "rsdrill.cli.logs", "rsdrill.engine.runner",
    "rsdrill.engine.check", "rsdrill.engine.audit", "rsdrill.engine.rollbacks",
    "rsdrill.experiment.loader", "rsdrill.experiment.cluster_fit", "rsdrill.analysis.metrics",
    "rsdrill.probes.register", "rsdrill.faultfs.mount", "rsdrill.faultfs.control",
    "rsdrill.fleet.gate", "rsdrill.platforms.discovery", "rsdrill.platforms.sandbox.target",
    "rsdrill.platforms.sandbox.sharded", "rsdrill.platforms.command.stepdown",
    "rsdrill.platforms.machine.network", "rsdrill.platforms.machine.disk_fill",
    "rsdrill.sandbox.cluster", "rsdrill.sandbox.sharded", "rsdrill.report.html",
    "numpy", "yaml", "pymongo", "getpass", "sqlite3",
)  # fmt: skip


@dataclass
class Launch:
    """What a forked child runs: the command's arguments, its stdio set up already."""

    args: list[str]


def preload() -> None:
    # As rsdrill's entry point does before NumPy comes (rsdrill/cli/entry.py); the child's
    # environment is the caller's, and the entry point sets it there again.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    # rsdrill's models defer their build to their first use (`--help` needs none), and a
    # command that reads an experiment or writes a result then builds most of them: ~0.4 s of
    # CPU in each child. Built here once, a child finds them built, as it would after that use.
    for model in _subclasses(BaseModel):
        if model.__module__.startswith("rsdrill.") and not model.__pydantic_complete__:
            with contextlib.suppress(PydanticUndefinedAnnotation):
                model.model_rebuild()
    gc.freeze()  # what the imports made stays shared with each child, not copied on its writes


def _subclasses(cls: type[BaseModel]) -> Iterator[type[BaseModel]]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def serve(control: socket.socket) -> Launch | None:
    """Fork a child per request until `control` closes (None); in a child, its Launch."""
    room = CommandLineRoom()
    os.close(os.pidfd_open(os.getpid()))  # how children are watched: without it, no READY
    selector = selectors.DefaultSelector()
    selector.register(control, selectors.EVENT_READ)
    control.send(READY)
    while True:
        for key, _ in selector.select():
            if key.fileobj is control:
                message, fds, _, _ = socket.recv_fds(control, MAX_REQUEST_BYTES, 4)
                if not message:
                    return None
                launched = _fork(json.loads(message), fds, room, selector)
                if isinstance(launched, Launch):
                    return launched
            else:
                pid, reply = key.data
                selector.unregister(key.fileobj)
                os.close(key.fd)
                _, status = os.waitpid(pid, 0)
                with contextlib.suppress(OSError):  # the caller may be gone: nobody to tell
                    reply.send(str(status).encode())
                reply.close()


def _fork(
    request: dict[str, Any], fds: list[int], room: CommandLineRoom,
    selector: selectors.BaseSelector,
) -> Launch | None:  # fmt: skip
    reply = socket.socket(fileno=fds[0])
    stdio = fds[1:]
    argv = [str(a) for a in request["argv"]]
    try:
        cmdline = room.encode(argv)
    except ValueError as exc:
        reply.send(json.dumps({"error": str(exc)}).encode())
        return _close(reply, stdio)
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(ready_r)
        # Nothing of the zygote's stays open in the child: the control socket, the other
        # children's reply sockets and pidfds, the selector's epoll.
        for key in list(selector.get_map().values()):
            if isinstance(key.data, tuple):
                key.data[1].close()
            if isinstance(key.fileobj, socket.socket):
                key.fileobj.close()
            else:
                os.close(key.fd)
        selector.close()
        reply.close()
        try:
            _become(request, stdio, room, cmdline)
        except OSError as exc:
            os.write(ready_w, json.dumps({"errno": exc.errno, "error": exc.strerror}).encode())
            os._exit(127)
        os.write(ready_w, b"{}")
        os.close(ready_w)
        return Launch(args=argv[3:])
    os.close(ready_w)
    with os.fdopen(ready_r, "rb") as ready:
        started = json.loads(ready.read() or b'{"error": "the child died before it started"}')
    if "error" in started:
        os.waitpid(pid, 0)
        reply.send(json.dumps(started).encode())
        return _close(reply, stdio)
    pidfd = os.pidfd_open(pid)
    selector.register(pidfd, selectors.EVENT_READ, (pid, reply))
    reply.send(json.dumps({"pid": pid}).encode())
    for fd in stdio:
        os.close(fd)
    return None


def _close(reply: socket.socket, stdio: list[int]) -> None:
    reply.close()
    for fd in stdio:
        os.close(fd)


def _become(
    request: dict[str, Any], stdio: list[int], room: CommandLineRoom, cmdline: bytes
) -> None:
    """Set the forked child up as exec would have: group, directory, files, environment, name."""
    if request["new_session"]:
        os.setsid()
    elif request["group"] >= 0:  # Popen's process_group, -1 for none
        os.setpgid(0, request["group"])
    os.chdir(request["cwd"])
    for target, fd in enumerate(stdio):
        os.dup2(fd, target)
    for fd in stdio:
        if fd > 2:
            os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    _signals_as_exec_leaves_them(set(request["ignored"]), set(request["blocked"]))
    room.write(cmdline)


def _signals_as_exec_leaves_them(ignored: set[int], blocked: set[int]) -> None:
    """A signal the caller ignores now stays ignored through exec, and its calling thread's
    mask stays; Python then starts with SIGINT raising KeyboardInterrupt unless ignored, and
    SIGPIPE and SIGXFSZ ignored. The zygote's own were the caller's when it started, which
    may not be the caller's now (it ignored SIGINT then, say)."""
    for sig in signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP}:
        if sig in ignored or sig in (signal.SIGPIPE, signal.SIGXFSZ):
            wanted: Any = signal.SIG_IGN
        elif sig == signal.SIGINT:
            wanted = signal.default_int_handler
        else:
            wanted = signal.SIG_DFL
        if signal.getsignal(sig) is not wanted:
            signal.signal(sig, wanted)
    signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def run(launch: Launch) -> None:
    """Run the command as `python -m rsdrill.cli` runs it: the working directory first on the
    path, argv[0] the module's file."""
    sys.path[0] = os.getcwd()
    sys.argv = ["rsdrill.cli", *launch.args]
    runpy.run_module("rsdrill.cli", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    preload()
    if (launched := serve(socket.socket(fileno=int(sys.argv[1])))) is not None:
        run(launched)
