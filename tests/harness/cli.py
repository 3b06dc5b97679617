"""The `rsdrill` command line in a process of its own, as the tests start it.

`Rsdrill(args, **popen_kwargs)` is `subprocess.Popen([*CLI, *args], **popen_kwargs)` and
`rsdrill_run(args, **run_kwargs)` is `subprocess.run` of the same. Where nothing that acts
while Python starts differs, the process is forked from this worker's zygote
(tests/harness/cli_zygote.py), which has made the command line's imports once (0.5-1 s of CPU
per process otherwise). It is still a process of its own, with its own pid, signals, stdio,
environment, working directory and exit status: what a test asserts of a process started by
exec holds of it. Anything the zygote cannot give as exec would (another interpreter or
options, pass_fds, preexec_fn, credentials, a terminal, an environment that differs in a
variable read at start) is started by exec, as is everything when RSDRILL_TEST_CLI_EXEC=1.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rsdrill.environ import environ_copy
from rsdrill.sandbox.zygote import READ_AT_START, starts_alike
from tests.harness.cli_zygote import MAX_REQUEST_BYTES, READY

CLI = [sys.executable, "-m", "rsdrill.cli"]
EXEC_ENV = "RSDRILL_TEST_CLI_EXEC"
ROOT = Path(__file__).resolve().parents[2]
ROOM_BYTES = 8192  # blank command line each child writes its own over
# Read while Python, typer, rich or NumPy start (besides READ_AT_START's): a child that needs a
# different value than the zygote had is started by exec.
_READ_AT_IMPORT = ("OPENBLAS", "NPY_", "TYPER_", "_TYPER_", "TERMINAL_WIDTH", "FORCE_TERMINAL",
                   "COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR", "TERM", "COLORTERM")  # fmt: skip
# The worker's environment before any test changed it: the zygote's, and what a child's must
# match where Python reads it at start.
_START_ENVIRON = environ_copy()
READY_TIMEOUT_S = 60.0
REPLY_TIMEOUT_S = 60.0


class _ZygoteGone(OSError):
    """The zygote closed its end: it died (the next start makes another)."""


class Rsdrill(subprocess.Popen[Any]):
    """`python -m rsdrill.cli ARGS` in a process of its own; subprocess.Popen's keywords."""

    def __init__(self, args: Sequence[str | os.PathLike[str]], **kwargs: Any) -> None:
        self._reply: socket.socket | None = None
        self._status: int | None = None
        super().__init__([*CLI, *map(os.fspath, args)], **kwargs)

    def _execute_child(  # type: ignore[override]
        self, args: list[str], executable: Any, preexec_fn: Any, close_fds: bool,
        pass_fds: Sequence[int], cwd: Any, env: Any, startupinfo: Any, creationflags: int,
        shell: bool, p2cread: int, p2cwrite: int, c2pread: int, c2pwrite: int, errread: int,
        errwrite: int, restore_signals: bool, gid: Any, gids: Any, uid: Any, umask: int,
        start_new_session: bool, process_group: int,
    ) -> None:  # fmt: skip
        plain = (executable is None and preexec_fn is None and close_fds and not pass_fds
                 and not shell and gid is None and gids is None and uid is None
                 and umask < 0)  # fmt: skip
        stdio = [p2cread if p2cread != -1 else 0, c2pwrite if c2pwrite != -1 else 1,
                 errwrite if errwrite != -1 else 2]  # fmt: skip
        try:
            launched = _zygote_launch(args, env, cwd, stdio, start_new_session,
                                      process_group) if plain else None  # fmt: skip
        except BaseException:
            self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)
            raise
        if launched is None:
            super()._execute_child(  # type: ignore[misc]
                args, executable, preexec_fn, close_fds, pass_fds, cwd, env, startupinfo,
                creationflags, shell, p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite,
                restore_signals, gid, gids, uid, umask, start_new_session, process_group,
            )  # fmt: skip
            return
        self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)
        self.pid, self._reply = launched
        self._child_created = True

    # Popen reaps its child with waitpid; a forked one is the zygote's child, whose wait status
    # comes over the socket its start was asked on.
    def _internal_poll(self, _deadstate: int | None = None, **kwargs: Any) -> int | None:
        if self._reply is not None or self._status is not None:
            kwargs["_waitpid"] = self._waitpid
        return super()._internal_poll(_deadstate, **kwargs)  # type: ignore[misc]

    def _try_wait(self, wait_flags: int) -> tuple[int, int]:
        if self._reply is None and self._status is None:
            return super()._try_wait(wait_flags)  # type: ignore[misc,no-any-return]
        return self._waitpid(self.pid, wait_flags)

    def _waitpid(self, pid: int, flags: int) -> tuple[int, int]:
        if self._status is None:
            assert self._reply is not None
            self._reply.setblocking(not flags & os.WNOHANG)
            try:
                message = self._reply.recv(64)
            except BlockingIOError:
                return 0, 0
            if not message:
                raise OSError(f"rsdrill process {pid}: its zygote ended without its status")
            self._status = int(message)
            self._reply.close()
            self._reply = None
        return pid, self._status


def rsdrill_run(
    args: Sequence[str | os.PathLike[str]], *, input: Any = None, timeout: float | None = None,
    check: bool = False, **kwargs: Any,
) -> subprocess.CompletedProcess[Any]:  # fmt: skip
    """`subprocess.run([*CLI, *args], ...)`, the process an `Rsdrill`."""
    if input is not None:
        kwargs["stdin"] = subprocess.PIPE
    if kwargs.pop("capture_output", False):
        kwargs["stdout"] = kwargs["stderr"] = subprocess.PIPE
    with Rsdrill(args, **kwargs) as process:
        try:
            stdout, stderr = process.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            process.kill()
            exc.stdout, exc.stderr = process.communicate()
            raise
        except BaseException:
            process.kill()
            raise
    done = subprocess.CompletedProcess(process.args, process.poll(), stdout, stderr)
    if check:
        done.check_returncode()
    return done


class _Zygote:
    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.environ = _START_ENVIRON
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.harness.cli_zygote", str(theirs.fileno()),
             " " * ROOM_BYTES],
            pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, cwd=ROOT, env=self.environ,
        )  # fmt: skip
        theirs.close()
        self.channel = ours
        self.owner = os.getpid()
        self.lock = threading.Lock()
        try:
            self.channel.settimeout(READY_TIMEOUT_S)
            if self.channel.recv(64) != READY:
                raise OSError("the rsdrill zygote did not start")
        except OSError:
            self.close()
            raise

    def serves(self, environ: dict[str, str], stdio: list[int]) -> bool:
        """Whether a child forked from here would run as one exec'd in `environ` would."""
        alike = starts_alike(_as_numpy_gets_it(self.environ), _as_numpy_gets_it(environ),
                             READ_AT_START + _READ_AT_IMPORT)  # fmt: skip
        return alike and not any(os.isatty(fd) for fd in stdio)

    def launch(
        self, argv: list[str], environ: dict[str, str], cwd: str, stdio: list[int],
        new_session: bool, group: int,
    ) -> tuple[int, socket.socket] | None:  # fmt: skip
        request = {"argv": argv, "env": environ, "cwd": cwd, "new_session": new_session,
                   "group": group, "ignored": _ignored_signals(),
                   "blocked": sorted(signal.pthread_sigmask(signal.SIG_BLOCK, []))}  # fmt: skip
        message = json.dumps(request).encode()
        if len(message) > MAX_REQUEST_BYTES:
            return None
        reply, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            with self.lock:
                socket.send_fds(self.channel, [message], [theirs.fileno(), *stdio])
            theirs.close()
            reply.settimeout(REPLY_TIMEOUT_S)
            answer = json.loads(reply.recv(65536) or b"null")
        except BaseException:
            reply.close()
            theirs.close()
            raise
        if answer is not None and "pid" in answer:
            return int(answer["pid"]), reply
        reply.close()
        if answer is None:
            raise _ZygoteGone("the rsdrill zygote closed")
        if "errno" in answer:  # the child could not start (a working directory that is gone)
            raise OSError(answer["errno"], answer["error"])
        return None  # a command line too long for the room: exec it

    def close(self) -> None:
        self.channel.close()
        self.process.kill()
        self.process.wait()


def signal_sets(pid: int | str) -> dict[str, set[int]]:
    """The kernel's view of a process's signals (`pid` or "self"): SigIgn, ignored; SigBlk,
    blocked by its main thread; SigCgt, caught. A library's C code may have set some."""
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    fields = dict(line.split(":\t", 1) for line in lines if ":\t" in line)
    return {name: {sig for sig in range(1, signal.NSIG) if int(fields[name], 16) >> (sig - 1) & 1}
            for name in ("SigIgn", "SigBlk", "SigCgt")}  # fmt: skip


def _ignored_signals() -> list[int]:
    """The signals this process ignores now, which a process it execs would go on ignoring."""
    return sorted(signal_sets("self")["SigIgn"])


def _as_numpy_gets_it(environ: dict[str, str]) -> dict[str, str]:
    """rsdrill's entry point sets OPENBLAS_NUM_THREADS=1 where it is unset, before NumPy
    comes (rsdrill/cli/entry.py): unset and 1 are the same to it."""
    return {"OPENBLAS_NUM_THREADS": "1", **environ}


_lock = threading.Lock()
_zygote: _Zygote | None = None
_broken = False


def _zygote_launch(
    argv: list[str], env: Any, cwd: Any, stdio: list[int], new_session: bool, group: int,
) -> tuple[int, socket.socket] | None:  # fmt: skip
    """The pid of `argv` forked from this process's zygote and the socket its status will come
    on, or None when it must be started by exec."""
    global _zygote, _broken
    if os.environ.get(EXEC_ENV) == "1" or argv[: len(CLI)] != CLI:
        return None
    environ = (
        environ_copy() if env is None else {os.fsdecode(k): os.fsdecode(v) for k, v in env.items()}
    )
    directory = os.path.abspath(os.fspath(cwd)) if cwd is not None else os.getcwd()
    with _lock:
        if _zygote is not None and _zygote.owner != os.getpid():
            _zygote = None  # inherited across a fork: the parent's
        if _zygote is None and not _broken:
            try:
                _zygote = _Zygote()
            except OSError as exc:
                _broken = True
                warnings.warn(f"rsdrill zygote: {exc}; the CLI is started by exec", stacklevel=2)
        zygote = _zygote
    if zygote is None or not zygote.serves(environ, stdio):
        return None
    try:
        return zygote.launch(argv, environ, directory, stdio, new_session, group)
    except _ZygoteGone:
        with _lock:
            if _zygote is zygote:
                _zygote = None  # dead: the next start makes another
        return None
