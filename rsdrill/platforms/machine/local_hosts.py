"""The local platform's members as processes of this machine: found by port, signalled,
restarted with the command the experiment gives (under libfaketime for a run that skews their
clocks), their data directories wiped."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

from rsdrill.connection import ConnectOptions, answers_hello, member_down
from rsdrill.environ import environ_copy
from rsdrill.experiment.target import LocalMember
from rsdrill.logtail import tail_lines
from rsdrill.platforms.base import TargetError
from rsdrill.platforms.machine import faketime
from rsdrill.platforms.machine.network import host_port, rejoin_partition
from rsdrill.redact import redact_uri
from rsdrill.sandbox.cluster import booting

START_TIMEOUT_S = 60.0
# Whether a member is down is told by a refused connection, at once; what is not refused within
# this is not down. Whether it answers then gets longer, for a loaded member.
DOWN_CHECK_S = 1.0
ANSWER_CHECK_S = 2.0
# A failed start quotes the last lines of what its command wrote.
OUTPUT_TAIL_LINES = 10
# mongod's error and fatal lines (its JSON log's severity), kept in a failed start's quote:
# a failing mongod logs its cause, then a shutdown's worth of chatter.
_SEVERE_LINE = re.compile(r'"s"\s*:\s*"[EF]')


def _listening_inodes(port: int) -> set[str]:
    """The inodes of the listening TCP sockets on `port` (from /proc)."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(inode)
    return inodes


def listening_pid(port: int) -> int | None:
    """The pid of the process with a listening TCP socket on `port` (from /proc)."""
    inodes = _listening_inodes(port)
    if not inodes:
        return None
    targets = {f"socket:[{i}]" for i in inodes}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            for fd in (proc / "fd").iterdir():
                if os.readlink(fd) in targets:
                    return int(proc.name)
        except OSError:
            continue
    return None


class LocalHosts:
    """Processes found by their listening port; restarted with the member's own command."""

    def __init__(
        self,
        members: tuple[LocalMember, ...],
        log_dir: Path,
        options: ConnectOptions,
        clock_files: dict[str, Path] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.members = {m.host: m for m in members}
        # Where the members' start commands and relative dbpaths are read from: the run's
        # working directory, journaled, so that `recover` elsewhere starts (and wipes) the same.
        self.cwd = (cwd or Path.cwd()).resolve()
        self.log_dir = log_dir
        self.options = options
        # host → the libfaketime offset file it is (re)started with (clock-skew runs only).
        self.clock_files = dict(clock_files or {})
        # A stopped or killed member's pid, remembered: a SIGSTOPped one still holds its port,
        # a killed one no longer has any.
        self._pids: dict[str, int] = {}

    def pid(self, host: str) -> int | None:
        found = listening_pid(host_port(host))
        if found is not None:
            self._pids[host] = found
        return found

    def _require(self, host: str) -> int:
        pid = self.pid(host) or self._pids.get(host)
        if pid is None:
            raise TargetError(f"{host}: no process is listening on that port")
        return pid

    def kill(self, host: str) -> int:
        pid = self._require(host)
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while listening_pid(host_port(host)) == pid and time.monotonic() < deadline:
            time.sleep(0.01)
        faketime.release(pid)
        return pid

    def terminate(self, host: str, timeout_s: float = START_TIMEOUT_S) -> None:
        """SIGTERM: a clean shutdown (mongod steps down and closes its files); SIGKILL if it
        has not let go of its port within `timeout_s`."""
        port = host_port(host)
        pid = self._require(host)
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while listening_pid(port) == pid:
            if time.monotonic() > deadline:
                self.kill(host)
                return
            time.sleep(0.05)
        faketime.release(pid)

    def stop(self, host: str) -> int:
        pid = self._require(host)
        os.kill(pid, signal.SIGSTOP)
        return pid

    def cont(self, host: str) -> int:
        pid = self._require(host)
        os.kill(pid, signal.SIGCONT)
        return pid

    def is_up(self, host: str) -> bool:
        """Whether the member is up (True: it answers a hello) or down (False: nothing listens
        at its address; its start command can take the port). TargetError when neither: a
        process holds its port but does not answer (frozen, hung, or refusing the handshake):
        its start command would fail on the busy port, and its data must not be wiped."""
        if member_down(host, DOWN_CHECK_S, options=self.options):
            return False
        if answers_hello(host, ANSWER_CHECK_S, options=self.options):
            return True
        if not _listening_inodes(host_port(host)):
            return False  # nothing listens here: a partition dropped the hello, not refused it
        pid = self.pid(host)
        held = f"its process (pid {pid})" if pid is not None else "a process"
        raise TargetError(f"{host}: not started: {held} holds its port but does not answer a "
                          "hello (a frozen process?); resume or end it first")  # fmt: skip

    def restart_action(self, host: str, *, wipe: bool) -> dict[str, object]:
        """The journal record that lets `rsdrill recover` restart this member."""
        member = self.members[host]
        return {
            "action": "local-start",
            "host": host,
            "command": member.start,
            "dbpath": member.dbpath,
            "cwd": str(self.cwd),
            "wipe": wipe,
            "log_dir": str(self.log_dir),
            **({"clock_file": str(self.clock_files[host])} if host in self.clock_files else {}),
            "connect": self.options.journaled(),
        }

    def wipe(self, host: str) -> None:
        member = self.members[host]
        if not member.dbpath:
            raise TargetError(f"{host}: wiping its data needs the member's `dbpath`")
        # By its socket, not its pid: another user's process holds one with fds we cannot read.
        if _listening_inodes(host_port(host)):
            raise TargetError(f"{host} is running: not wiping its data")
        wipe_directory(self.cwd / member.dbpath)

    def start(self, host: str, *, wipe: bool, boot_s: float = 0.0) -> None:
        """Start the member with its command unless it is up (repeatable; see `is_up` for a
        member neither up nor down); with `boot_s` the command runs that much later and this
        returns at once (a booting host)."""
        if self.is_up(host):
            return
        member = self.members[host]
        if wipe:
            self.wipe(host)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_dir / f"{host.replace(':', '_')}.log"
        env = None
        if host in self.clock_files:
            lib = faketime.library()
            if lib is None:
                raise TargetError(f"{host}: its clock is skewed through libfaketime, which is "
                                  f"not installed ({faketime.INSTALL_HINT})")  # fmt: skip
            env = faketime.preload_env(self.clock_files[host], lib, environ_copy())
        with log.open("ab") as out:
            offset = out.seek(0, os.SEEK_END)  # where this start's output begins
            process = subprocess.Popen(
                booting(shlex.split(member.start), boot_s), stdin=subprocess.DEVNULL,
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env,
                cwd=self.cwd,
            )  # fmt: skip
        if boot_s > 0:
            # What the command starts (forked or not) inherits the booting process's class.
            rejoin_partition(process.pid, host_port(host))
            return
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            # Polled before the hello: a member that answered before its command exited
            # (whatever the status) is up.
            status = process.poll()
            if answers_hello(host, options=self.options):
                break
            # Exit 0 is a daemonizing command (mongod --fork) whose member is still coming up.
            if status is not None and status != 0:
                raise TargetError(_start_failed(
                    host, f"its start command `{member.start}` {_exit_status(status)} before "
                    "the member answered a hello", log, offset,
                ))  # fmt: skip
            if time.monotonic() > deadline:
                raise TargetError(_start_failed(
                    host, f"did not answer within {START_TIMEOUT_S:.0f}s after "
                    f"`{member.start}`", log, offset,
                ))  # fmt: skip
            time.sleep(0.05)
        pid = self.pid(host)
        if pid is not None:
            rejoin_partition(pid, host_port(host))


def _exit_status(status: int) -> str:
    if status < 0:
        return f"was killed by {signal.Signals(-status).name}"
    return f"exited with status {status}"


def _start_failed(host: str, what: str, log: Path, offset: int) -> str:
    """One message: what went wrong, where the output is, its last lines; passwords masked
    (a start command, and what it prints, may hold one)."""
    tail = _output_tail(log, offset)
    quoted = "".join(f"\n    {line}" for line in tail)
    return redact_uri(f"{host}: {what} (output in {log})" + (":" * bool(tail)) + quoted)


def _output_tail(log: Path, offset: int) -> list[str]:
    """The last lines written to `log` after `offset`, after mongod's error lines from before
    them (... between)."""
    lines = tail_lines(log, offset)
    older = [line for line in lines[:-OUTPUT_TAIL_LINES] if _SEVERE_LINE.search(line)]
    return older[-OUTPUT_TAIL_LINES // 2 :] + ["..."] * bool(older) + lines[-OUTPUT_TAIL_LINES:]


def wipe_directory(path: Path) -> None:
    """Empty a data directory, keeping the directory itself (as a new blank volume would)."""
    for child in path.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()
