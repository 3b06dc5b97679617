"""The sandbox launcher: start, inspect, signal and stop a local replica set's member processes.

A sandbox is a directory holding `replset.json` (the set, see `config.py`), `sandbox.json` (the
engine that runs it) and one directory per member with its `data/`, `member.log` and `pid`. Each
member is its own OS process in its own session, so SIGKILL and SIGSTOP hit one member and nothing
else. Every operation reads the directory again: `up` returns while the members keep running, and
any later process can inspect, signal or stop them.

Two engines start members: the built-in emulator (this module) and a real `mongod` (`mongod.py`).
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from rsdrill.connection import (
    AccessRefused,
    ConnectOptions,
    DirectConnection,
    TlsSettings,
    WireClientError,
)
from rsdrill.logtail import last_line
from rsdrill.procstat import live_thread_state, stat_fields
from rsdrill.sandbox.auth import AUTH_FILE, create_auth, read_auth
from rsdrill.sandbox.certs import TLS_DIR, make_tls_files, tls_files
from rsdrill.sandbox.config import (
    CONFIG_FILE,
    DATA_FILE,
    MemberSpec,
    ReplSetSpec,
    empty_dir,
    member_dir,
)
from rsdrill.sandbox.engine import Engine, Layout
from rsdrill.sandbox.errors import SandboxError
from rsdrill.sandbox.members import QUERY_TIMEOUT_S, hello, is_writable_primary
from rsdrill.sandbox.zygote import MODULE_ARGV, fork_member
from rsdrill.scram import Credentials
from rsdrill.states import member_state

ENGINE_FILE = "sandbox.json"
ENGINE_CHOICES = ("auto", "emulator", "mongod")
START_TIMEOUT_S = 60.0
_POLL_S = 0.02
_HAVE_PROC = Path("/proc/self/stat").exists()


@dataclass(frozen=True)
class MemberStatus:
    """One member as `sandbox status` reports it.

    `state` is the member's own replica-set state (PRIMARY, SECONDARY, STARTUP2, REMOVED, ...),
    or DOWN when its process is not running, STOPPED when it is SIGSTOPped, UNREACHABLE when it
    runs but does not answer.
    """

    name: str
    pid: int | None
    state: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class EmulatorEngine:
    """Members are `python -P -m rsdrill_emulator` processes."""

    name = "emulator"

    def __init__(self, executable: str = sys.executable) -> None:
        self.executable = executable

    def argv(self, sandbox: Layout, member: MemberSpec, *, init: bool) -> list[str]:
        argv = [self.executable, *MODULE_ARGV, "--dir", str(sandbox.directory)]
        argv += ["--host", member.host]
        return [*argv, "--init"] if init else argv

    def router_argv(self, directory: Path, host: str) -> list[str]:
        """A router of the sharded sandbox in `directory` (its pid file in `routers/<port>/`,
        beside which `wait_gone` finds its port)."""
        return [self.executable, *MODULE_ARGV, "--dir", str(directory),
                "--host", host, "--router"]  # fmt: skip

    def initiate(self, sandbox: Layout, deadline: float) -> None:
        """Step the first member up so the set has a primary without waiting out an election."""
        first = sandbox.spec.members[0]
        election_timeout_s = sandbox.spec.settings.election_timeout_ms / 1000
        accepted_at: float | None = None
        options = sandbox.connect_options
        while not is_writable_primary(first.host, options):
            now = time.monotonic()
            if now > deadline:
                raise SandboxError(
                    f"{first.host} did not become a writable primary in time "
                    f"(see {member_dir(sandbox.directory, first) / 'member.log'})",
                    exit_code=4,
                )
            # Re-ask only if the step-up was refused (peers not heard from yet) or its election
            # seems lost; asking again mid-election would start yet another term.
            # A standalone server takes writes once it has opened its data: nothing to ask.
            stands = not sandbox.spec.standalone
            if stands and (accepted_at is None or now - accepted_at > 2 * election_timeout_s):
                conn = DirectConnection(first.host, QUERY_TIMEOUT_S, options)
                try:
                    accepted = conn.command("admin", {"replSetStepUp": 1}).get("ok") == 1
                    accepted_at = now if accepted else None
                except WireClientError:
                    accepted_at = None
                finally:
                    conn.close()
            time.sleep(_POLL_S)


def choose_engine(requested: str) -> tuple[Engine, str]:
    """The engine for `--engine requested`, and a few words on why it was chosen."""
    if requested not in ENGINE_CHOICES:
        raise SandboxError(
            f"unknown engine {requested!r}; choose one of {', '.join(ENGINE_CHOICES)}"
        )
    mongod = shutil.which("mongod")
    if requested == "emulator":
        return EmulatorEngine(), "requested with --engine emulator"
    if requested == "mongod":
        if mongod is None:
            raise SandboxError("--engine mongod: no mongod executable on PATH")
        return _mongod_engine(mongod), f"requested with --engine mongod ({mongod})"
    if mongod is not None:
        return _mongod_engine(mongod), f"auto: found {mongod} on PATH"
    return EmulatorEngine(), "auto: no mongod on PATH"


def _mongod_engine(executable: str) -> Engine:
    # Imported here because mongod.py builds on this module's helpers.
    from rsdrill.sandbox.mongod import MongodEngine

    return MongodEngine(executable)


def _load_engine(record: dict[str, str]) -> Engine:
    if record.get("engine") == "mongod":
        return _mongod_engine(record["executable"])
    return EmulatorEngine(record.get("executable", sys.executable))


def _listening(host: str) -> bool:
    address, port = host.rsplit(":", 1)
    try:
        with socket.create_connection((address, int(port)), timeout=0.2):
            return True
    except OSError:
        return False


def port_free(address: str, port: int) -> bool:
    """True when `port` can be bound on `address` (as a listening server would bind it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((address, port))
        except OSError:
            return False
    return True


def _proc_state(pid: int) -> str | None:
    """The process's state letter (R, S, T, Z, ...), or None when there is no such process."""
    if not _HAVE_PROC:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return "R"
    fields = stat_fields(pid)
    return None if fields is None else fields[0]


def _unrecorded_members(directory: Path, known: set[int]) -> list[tuple[int, int]]:
    """(pid, port) of live processes whose command line runs a member of this sandbox."""
    if not _HAVE_PROC:
        return []
    needle = str(directory).encode()
    out = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) in known:
            continue
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if not any(a == needle or a.startswith(needle + b"/") for a in args):
            continue
        port = _port_argument(args)
        if port is not None and _proc_state(int(proc.name)) not in (None, "Z", "X"):
            out.append((int(proc.name), port))
    return out


def _port_argument(args: list[bytes]) -> int | None:
    """The port from `--host H:P` (emulator) or `--port P` (mongod)."""
    for flag, value in itertools.pairwise(args):
        text = value.decode(errors="replace")
        if flag == b"--host" and text.rsplit(":", 1)[-1].isdigit():
            return int(text.rsplit(":", 1)[1])
        if flag == b"--port" and text.isdigit():
            return int(text)
    return None


def _is_member_process(pid: int, port: int) -> bool:
    # A pid file can outlive its process and the pid be reused: the command line must name the port.
    if not _HAVE_PROC:
        return True
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    if not cmdline:
        # Just spawned: Popen returns as exec begins, before the kernel sets the new arguments up.
        return True
    wanted = str(port).encode()
    args = cmdline.split(b"\0")
    return any(arg == wanted or arg.endswith(b":" + wanted) for arg in args)


def process_state(pid: int, port: int) -> str | None:
    """The state letter of the member process serving `port`, or None when it is not running."""
    state = _proc_state(pid)
    if state in ("Z", "X"):
        # The main thread may end first: the process's other threads (the commit thread in
        # an fsync) hold its files, the listening socket too, until they end as well.
        if (exiting := live_thread_state(pid)) is not None:
            return exiting
        # A member started by this very process (demo, tests) stays a zombie until reaped.
        with suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        return None
    if state is None or not _is_member_process(pid, port):
        return None
    return state


def spawn(argv: list[str], log_path: Path, pid_path: Path) -> int:
    """Start a member or router process in a session of its own (signalled as a group), its
    output appended to `log_path`, its pid recorded in `pid_path`. An emulator's is forked
    from this process's zygote when it can be (the same process, without its imports)."""
    pid = fork_member(argv, log_path)
    if pid is None:
        with open(log_path, "ab") as log:
            pid = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            ).pid
    pid_path.write_text(f"{pid}\n")
    return pid


def booting(argv: list[str], boot_s: float) -> list[str]:
    """`argv` started `boot_s` later by the same process (a host booting before its mongod):
    a shell sleeps, then becomes the member (exec keeps the pid, its session and cgroups, and
    its command line names the member's port throughout)."""
    if boot_s <= 0:
        return argv
    return ["sh", "-c", 'sleep "$0" && exec "$@"', f"{boot_s:.3f}", *argv]


def signal_process(pid: int, sig: int) -> None:
    """Signal the member's whole process group (each member leads its own session)."""
    with suppress(ProcessLookupError):
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)


def set_uri(
    spec: ReplSetSpec, login: Credentials | None = None, directory: Path | None = None
) -> str:
    """The connection string of a sandbox of `spec` in `directory`: with the login when it
    has one, and the TLS files when it requires TLS."""
    hosts = ",".join(m.host for m in spec.members)
    user = f"{quote(login.user)}:{quote(login.password)}@" if login else ""
    options = [] if spec.standalone else [f"replicaSet={spec.set_name}"]
    if spec.tls and directory is not None:
        files = tls_files(directory)
        options += ["tls=true", f"tlsCAFile={quote(str(files.ca))}"]
        if spec.x509:
            options += [f"tlsCertificateKeyFile={quote(str(files.client))}",
                        "authMechanism=MONGODB-X509", "authSource=%24external"]  # fmt: skip
    return f"mongodb://{user}{hosts}/?{'&'.join(options)}".removesuffix("?")


class Sandbox:
    """A sandbox directory and the member processes it records."""

    def __init__(self, directory: Path, engine: Engine | None = None) -> None:
        """`engine` defaults to the one recorded in the directory when the sandbox went up."""
        self.directory = directory.resolve()
        self._spec: ReplSetSpec | None = None
        self._engine = engine

    @property
    def spec(self) -> ReplSetSpec:
        if self._spec is None:
            if not (self.directory / CONFIG_FILE).exists():
                raise SandboxError(
                    f"no sandbox in {self.directory}: start one with `rsdrill sandbox up`"
                )
            self._spec = ReplSetSpec.read(self.directory)
        return self._spec

    @property
    def credentials(self) -> Credentials | None:
        """The user to log in as, when the sandbox requires a login."""
        return read_auth(self.directory)

    @property
    def connect_options(self) -> ConnectOptions:
        """How rsdrill's own connections reach the members (login, TLS)."""
        spec, files = self.spec, tls_files(self.directory)
        tls = None
        if spec.tls:
            tls = TlsSettings(
                ca_file=str(files.ca),
                certificate_key_file=str(files.client) if spec.x509 else None,
            )
        credentials = self.credentials
        if spec.x509:
            credentials = Credentials("", "", "$external", "MONGODB-X509")
        return ConnectOptions(credentials=credentials, tls=tls, app_name="rsdrill-sandbox")

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            path = self.directory / ENGINE_FILE
            record = json.loads(path.read_text()) if path.exists() else {}
            self._engine = _load_engine(record)
        return self._engine

    @property
    def uri(self) -> str:
        """The set's connection string, with the user and password when it requires a login
        (print it through `rsdrill.redact.redact_uri`)."""
        return set_uri(self.spec, self.credentials, self.directory)

    def exists(self) -> bool:
        return (self.directory / CONFIG_FILE).exists()

    def _pid_path(self, member: MemberSpec) -> Path:
        return member_dir(self.directory, member) / "pid"

    def pid(self, member: MemberSpec) -> int | None:
        """The pid of the member's process if it is running."""
        return self._running_pid(self._pid_path(member), member.port)

    @staticmethod
    def _running_pid(path: Path, port: int) -> int | None:
        try:
            pid = int(path.read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if process_state(pid, port) is not None else None

    def running(self) -> dict[Path, int]:
        """Every member process still running, by pid file (whatever the config says), and any
        process of this sandbox without one (started just before its launcher was killed)."""
        found: dict[Path, int] = {}
        for path in sorted(self.directory.glob("members/*/pid")):
            if not path.parent.name.isdigit():
                continue
            pid = self._running_pid(path, int(path.parent.name))
            if pid is not None:
                found[path] = pid
        for pid, port in _unrecorded_members(self.directory, set(found.values())):
            found.setdefault(self.directory / "members" / str(port) / "pid", pid)
        return found

    def status(self) -> list[MemberStatus]:
        """Every member with its pid and state; members are asked in parallel."""

        def one(member: MemberSpec) -> MemberStatus:
            pid = self.pid(member)
            if pid is None:
                return MemberStatus(member.host, None, "DOWN")
            if process_state(pid, member.port) == "T":
                return MemberStatus(member.host, pid, "STOPPED")
            try:
                state = member_state(member.host, QUERY_TIMEOUT_S, options=self.connect_options,
                                     unreachable="UNREACHABLE")  # fmt: skip
            except AccessRefused:
                state = "UNREACHABLE"
            return MemberStatus(member.host, pid, state)

        members = self.spec.members
        with ThreadPoolExecutor(max_workers=len(members)) as pool:
            return list(pool.map(one, members))

    def resolve(self, ref: str) -> MemberSpec:
        """A member from `host:port`, a port, or a role (`primary`, `secondary`, `arbiter`)."""
        spec = self.spec
        role = ref.strip().upper()
        if role in ("PRIMARY", "SECONDARY", "ARBITER"):
            states = self.status()
            for member, status in zip(spec.members, states, strict=True):
                if status.state == role:
                    return member
            seen = ", ".join(f"{s.name} {s.state}" for s in states)
            raise SandboxError(f"no member is {role} right now ({seen})")
        for member in spec.members:
            if ref in (member.host, str(member.port)):
                return member
        names = ", ".join(m.host for m in spec.members)
        raise SandboxError(
            f"{ref!r} is not a member of this sandbox; use host:port, a port, "
            f"primary, secondary or arbiter (members: {names})"
        )

    def _require_pid(self, member: MemberSpec) -> int:
        pid = self.pid(member)
        if pid is None:
            raise SandboxError(f"{member.host} is not running")
        return pid

    def kill(self, member: MemberSpec) -> int:
        """SIGKILL the member and wait until it is gone; returns the pid it had."""
        pid = self._require_pid(member)
        signal_process(pid, signal.SIGKILL)
        if wait_gone({self._pid_path(member): pid}, time.monotonic() + 5):
            raise SandboxError(f"{member.host} (pid {pid}) survived SIGKILL", exit_code=4)
        self._pid_path(member).unlink(missing_ok=True)
        return pid

    def stop(self, member: MemberSpec) -> int:
        """SIGSTOP the member (a frozen host: the port stays open, nothing answers)."""
        pid = self._require_pid(member)
        signal_process(pid, signal.SIGSTOP)
        deadline = time.monotonic() + 5
        while process_state(pid, member.port) != "T":
            if time.monotonic() > deadline:
                raise SandboxError(f"{member.host} (pid {pid}) did not stop", exit_code=4)
            time.sleep(_POLL_S)
        return pid

    def cont(self, member: MemberSpec) -> int:
        """SIGCONT a stopped member."""
        pid = self._require_pid(member)
        signal_process(pid, signal.SIGCONT)
        return pid

    def start(self, member: MemberSpec, *, wipe: bool = False, boot_s: float = 0.0) -> int:
        """Restart a member that is not running: on its kept data, or empty (`wipe`: initial sync).

        Returns once the new process answers hello; catching up or syncing goes on after. With
        `boot_s` the host boots first: the process sleeps that long before the member starts,
        and this returns at once (nobody waits on a booting host).
        """
        running = self.pid(member)
        if running is not None:
            raise SandboxError(f"{member.host} is already running (pid {running})")
        if wipe:
            self.wipe(member)
        pid = self._spawn(member, init=False, boot_s=boot_s)
        if boot_s <= 0:
            self._wait_answering([member], time.monotonic() + START_TIMEOUT_S)
        return pid

    def wipe(self, member: MemberSpec) -> None:
        """Empty a stopped member's data directory (the directory stays: it may be a mount)."""
        running = self.pid(member)
        if running is not None:
            raise SandboxError(f"{member.host} is running (pid {running}): not wiping its data")
        empty_dir(member_dir(self.directory, member) / "data")

    def drop_data_files(self) -> None:
        """Delete every member's data files, keeping its events, log and rollback files (what
        a run's result is checked against); the members are not running."""
        for member in self.spec.members:
            for path in (member_dir(self.directory, member) / "data").glob(f"{DATA_FILE}*"):
                path.unlink()

    def _spawn(self, member: MemberSpec, *, init: bool, boot_s: float = 0.0) -> int:
        directory = member_dir(self.directory, member)
        (directory / "data").mkdir(parents=True, exist_ok=True)
        argv = booting(self.engine.argv(self, member, init=init), boot_s)
        return spawn(argv, directory / "member.log", self._pid_path(member))

    def _wait_answering(self, members: Iterable[MemberSpec], deadline: float) -> None:
        pending = list(members)
        options = self.connect_options
        while pending:
            for member in list(pending):
                if self.pid(member) is None:
                    raise exited_while_starting(
                        member.host, member_dir(self.directory, member) / "member.log"
                    )
                if _listening(member.host) and hello(member.host, options=options) is not None:
                    pending.remove(member)
            if pending and time.monotonic() > deadline:
                hosts = ", ".join(m.host for m in pending)
                raise SandboxError(
                    f"{hosts} did not answer hello in time (see member.log under "
                    f"{self.directory / 'members'})",
                    exit_code=4,
                )
            if pending:
                time.sleep(_POLL_S)

    def down(self, grace_s: float = 5.0) -> list[int]:
        """Stop every recorded member process and make sure none is left; returns their pids.

        Asks each member to shut down, then SIGTERM, then SIGKILL, each after a grace period.
        Stopped (SIGSTOPped) members are resumed first so they can act on any of it.
        """
        live = self.running()
        for pid in live.values():
            signal_process(pid, signal.SIGCONT)
        with ThreadPoolExecutor(max_workers=max(len(live), 1)) as pool:
            options = self.connect_options if self.exists() else ConnectOptions()
            hosts = [self._host_of(path) for path in live]
            list(pool.map(lambda host: _ask_shutdown(host, options), hosts))
        remaining = wait_gone(live, time.monotonic() + grace_s)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in remaining.values():
                signal_process(pid, sig)
            remaining = wait_gone(remaining, time.monotonic() + grace_s)
        if remaining:
            pids = ", ".join(str(p) for p in remaining.values())
            raise SandboxError(f"member processes survived SIGKILL: {pids}", exit_code=4)
        for path in live:
            path.unlink(missing_ok=True)
        return sorted(live.values())

    def _host_of(self, pid_path: Path) -> str:
        port = int(pid_path.parent.name)
        if self.exists():
            for member in self.spec.members:
                if member.port == port:
                    return member.host
        return f"127.0.0.1:{port}"


def _ask_shutdown(host: str, options: ConnectOptions) -> None:
    conn = DirectConnection(host, QUERY_TIMEOUT_S, options)
    try:
        conn.command("admin", {"shutdown": 1, "force": True})
    except WireClientError:
        pass  # the connection drops as the member exits; signals follow if it did not
    finally:
        conn.close()


def wait_gone(pids: dict[Path, int], deadline: float) -> dict[Path, int]:
    """Wait until the processes exit or `deadline` passes; returns those still running."""
    while True:
        remaining = {
            path: pid
            for path, pid in pids.items()
            if process_state(pid, int(path.parent.name)) is not None
        }
        if not remaining or time.monotonic() > deadline:
            return remaining
        time.sleep(_POLL_S)


def up(
    directory: Path,
    spec: ReplSetSpec,
    engine: Engine,
    before_start: Callable[[], None] | None = None,
    *,
    auth: bool = False,
    users: Mapping[str, Sequence[str]] | None = None,
    aws_users: Mapping[str, Sequence[str]] | None = None,
) -> Sandbox:
    """Start a fresh replica set in `directory` and return once it has a writable primary.

    `auth`: the set requires a login (emulator engine): a user with a random password is
    written to the directory (`Sandbox.credentials`; see `rsdrill.sandbox.auth`), and `users`
    (name → built-in roles such as "clusterMonitor" or "readWrite@app") beside it;
    `aws_users` (IAM ARN → roles) log in with MONGODB-AWS, checked by the STS endpoint
    `spec.aws_sts_url`.

    `before_start` runs once the directory is laid out, just before the members start (e.g. to
    mount their data directories).

    Refuses (exit code 2, nothing started) when a sandbox already runs there or a port is taken.
    A stopped sandbox left in the directory is replaced. On any failure, or Ctrl-C, every member
    started so far is stopped again.
    """
    sandbox = Sandbox(directory, engine)
    running = sandbox.running()
    if running:
        pids = ", ".join(str(p) for p in running.values())
        raise SandboxError(
            f"a sandbox is already running in {sandbox.directory} (pids {pids}); "
            f"stop it with `rsdrill sandbox down --dir {sandbox.directory}`"
        )
    for member in spec.members:
        address, port = member.host.rsplit(":", 1)
        if not 0 < int(port) < 65536:
            raise SandboxError(f"port {port} is out of range (1-65535); choose another --port-base")
        if not port_free(address, int(port)):
            raise SandboxError(
                f"port {port} is already in use on {address} (needed by {member.host}); "
                "choose another --port-base"
            )
    members_root = sandbox.directory / "members"
    if members_root.exists():
        if not sandbox.exists():
            raise SandboxError(
                f"{members_root} exists but {sandbox.directory} holds no sandbox; "
                "choose another --dir"
            )
        shutil.rmtree(members_root)
    sandbox.directory.mkdir(parents=True, exist_ok=True)
    spec.write(sandbox.directory)
    record = {"engine": engine.name, "executable": engine.executable}
    (sandbox.directory / ENGINE_FILE).write_text(json.dumps(record, indent=2) + "\n")
    (sandbox.directory / AUTH_FILE).unlink(missing_ok=True)
    shutil.rmtree(sandbox.directory / TLS_DIR, ignore_errors=True)
    if (auth or spec.tls) and engine.name != "emulator":
        raise SandboxError("a sandbox with a login or TLS needs the emulator engine")
    if (users or aws_users) and not auth:
        raise SandboxError("users with roles need a login: add --auth")
    if bool(aws_users) != bool(spec.aws_sts_url):
        raise SandboxError("MONGODB-AWS users need the STS endpoint that checks their logins: "
                           "give both --aws-user and --aws-sts-url")  # fmt: skip
    if auth:
        create_auth(sandbox.directory, users, aws_users)
    if spec.tls:
        make_tls_files(sandbox.directory, [m.host for m in spec.members])
    if before_start is not None:
        before_start()
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        for member in spec.members:
            sandbox._spawn(member, init=True)
        sandbox._wait_answering(spec.members, deadline)
        engine.initiate(sandbox, deadline)
    except BaseException:
        sandbox.down(grace_s=2.0)
        raise
    return sandbox


def exited_while_starting(what: str, log: Path) -> SandboxError:
    """The error for a member or router whose process ended before it answered, quoting the last
    line of its log (where a start's cause is)."""
    last = last_line(log)
    return SandboxError(f"{what} exited while starting (see {log})" + (f": {last}" if last else ""),
                        exit_code=4)  # fmt: skip
