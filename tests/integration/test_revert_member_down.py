"""A revert set by command (a fail point, a clock skew) concludes the fault is gone only when
the member is down, nothing listening at its address: a frozen member that times out, or one
that refuses the login `rsdrill recover --uri` was given, still holds it, and the revert stays
owed. A local member's restart runs its start command only then too: a frozen one holds its
port. Against the sandbox's emulator member processes."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from rsdrill.connection import ConnectOptions, DirectConnection, answers_hello
from rsdrill.engine.actions import carry_out
from rsdrill.experiment.target import LocalMember
from rsdrill.faults import FailCommandFault
from rsdrill.platforms.base import InjectionError, TargetError
from rsdrill.platforms.command.fail_command import FailCommand
from rsdrill.platforms.machine.clock import ClockSkew, clock_error
from rsdrill.platforms.machine.local_hosts import LocalHosts, listening_pid
from rsdrill.platforms.machine.process import HostKill
from rsdrill.sandbox.cluster import EmulatorEngine, Sandbox, up
from rsdrill.sandbox.config import MemberSpec, Settings, build_topology, member_dir

FAILED_CODE = 8


@pytest.fixture
def member(replset: Callable[..., Sandbox]) -> tuple[Sandbox, MemberSpec]:
    sandbox = replset("rs3")
    return sandbox, sandbox.spec.members[-1]


@pytest.fixture
def frozen(member: tuple[Sandbox, MemberSpec]) -> Iterator[tuple[Sandbox, MemberSpec]]:
    """The member SIGSTOPped for the test's first part; resumed afterwards, whatever happened."""
    sandbox, spec = member
    yield sandbox, spec
    if sandbox.pid(spec) is not None:
        sandbox.cont(spec)


def _ping_code(host: str, options: ConnectOptions) -> int | None:
    """The error code of a ping on the member (None: it succeeded)."""
    conn = DirectConnection(host, 10.0, options)
    try:
        reply = conn.command("admin", {"ping": 1})
    finally:
        conn.close()
    return None if reply.get("ok") else reply.get("code")


def _fail_ping(host: str, options: ConnectOptions) -> FailCommand:
    fault = FailCommandFault(kind="mongodb-fail-command", at=0, duration=60,
                             commands=("ping",), error_code=FAILED_CODE)  # fmt: skip
    fail = FailCommand(host, fault, options)
    fail.inject()
    assert _ping_code(host, options) == FAILED_CODE
    return fail


def _off(host: str, options: ConnectOptions, given: ConnectOptions | None = None) -> str:
    action = {"action": "fail-command-off", "host": host, "connect": options.journaled()}
    return carry_out(action, given)


def _reset(host: str, options: ConnectOptions) -> str:
    action = {"action": "clock-reset", "host": host, "connect": options.journaled()}
    return carry_out(action)


def test_a_frozen_members_fail_point_stays_owed(
    frozen: tuple[Sandbox, MemberSpec],
) -> None:
    sandbox, spec = frozen
    options = sandbox.connect_options
    fail = _fail_ping(spec.host, options)
    sandbox.stop(spec)
    with pytest.raises(TargetError, match="failCommand may still be on") as err:
        _off(spec.host, options)
    assert "timed out" in str(err.value)
    with pytest.raises(InjectionError):
        fail.revert()  # the run's own revert says so too
    sandbox.cont(spec)
    assert _ping_code(spec.host, options) == FAILED_CODE  # it was right: still on
    assert _off(spec.host, options) == f"{spec.host}: failCommand off"
    assert _ping_code(spec.host, options) is None


def test_a_frozen_members_clock_stays_owed(frozen: tuple[Sandbox, MemberSpec]) -> None:
    sandbox, spec = frozen
    options = sandbox.connect_options
    skew = ClockSkew(spec.host, 3600.0, 0.0, options)
    skew.inject()
    assert skew.verify(10.0)
    sandbox.stop(spec)
    with pytest.raises(TargetError, match="its clock may still be skewed"):
        _reset(spec.host, options)
    with pytest.raises(InjectionError):
        skew.revert()
    sandbox.cont(spec)
    error = clock_error(spec.host, 3600.0, options)
    assert error is not None and abs(error) < 60  # still skewed
    assert _reset(spec.host, options) == f"{spec.host}: clock back to real time"


def test_a_killed_member_holds_no_fail_point_nor_skew(
    member: tuple[Sandbox, MemberSpec],
) -> None:
    """As before: a member down is a revert done (it restarts without them)."""
    sandbox, spec = member
    options = sandbox.connect_options
    fail = _fail_ping(spec.host, options)
    ClockSkew(spec.host, 3600.0, 0.0, options).inject()
    sandbox.kill(spec)
    assert _off(spec.host, options) == (
        f"{spec.host}: not running, no fail point survives a restart"
    )
    assert _reset(spec.host, options).startswith(f"{spec.host}: not running")
    fail.revert()
    ClockSkew(spec.host, 3600.0, 0.0, options).revert()


@pytest.fixture
def locked(sandbox_dir: Path, free_port_base: Callable[[int], int]) -> Sandbox:
    spec = build_topology(
        "rs3", port_base=free_port_base(3), settings=Settings(election_timeout_ms=1000)
    )
    return up(sandbox_dir, spec, EmulatorEngine(), auth=True)


def _with_password(sandbox: Sandbox, password: str) -> tuple[str, ConnectOptions]:
    login = sandbox.credentials
    assert login is not None and login.password
    uri = sandbox.uri.replace(f":{quote(login.password, safe='')}@", f":{password}@")
    assert uri != sandbox.uri
    return uri, ConnectOptions.from_uri(uri)


def test_a_wrong_password_is_a_login_refused_not_a_member_down(locked: Sandbox) -> None:
    """`rsdrill recover --uri` with a wrong password: the login failure, naming the member and
    the user (never the password), and the fail point still owed; the right one turns it off."""
    host = locked.spec.members[0].host
    options = locked.connect_options
    _fail_ping(host, options)
    _, wrong = _with_password(locked, "WrongPw999")
    with pytest.raises(TargetError, match="failCommand may still be on") as err:
        _off(host, options, given=wrong)
    message = str(err.value)
    user = locked.credentials.user if locked.credentials else "?"
    assert message.startswith(
        f"{host}: failCommand may still be on: configureFailPoint on {host}: "
        f"login as {user} failed: "
    ), message
    assert "WrongPw999" not in message
    assert _ping_code(host, options) == FAILED_CODE
    assert _off(host, options, given=options) == f"{host}: failCommand off"
    assert _ping_code(host, options) is None


def _local(sandbox: Sandbox, spec: MemberSpec, command: str) -> tuple[LocalHosts, Path]:
    """The sandbox's member as a `platform: local` member started by `command`; its dbpath."""
    data = member_dir(sandbox.directory, spec) / "data"
    member = LocalMember(host=spec.host, start=command, dbpath=str(data))
    logs = sandbox.directory.parent / "local-logs"
    return LocalHosts((member,), logs, sandbox.connect_options), data


def _contents(directory: Path) -> list[Path]:
    return sorted(directory.rglob("*"))


def test_a_frozen_local_member_is_neither_started_nor_wiped(
    frozen: tuple[Sandbox, MemberSpec], tmp_path: Path
) -> None:
    """SIGSTOPped, it holds its port and answers nothing: its start command would fail on the
    busy port (and a wipe would empty its data under it). Recover's restart and the run's own
    say so in one line naming its pid, and run nothing; resumed, it is up as it was."""
    sandbox, spec = frozen
    marker = tmp_path / "started"
    hosts, data = _local(sandbox, spec, f"touch {marker}")
    kept = _contents(data)
    assert kept
    pid = sandbox.stop(spec)
    refused = (f"{spec.host}: not started: its process (pid {pid}) holds its port but does "
               "not answer a hello (a frozen process?); resume or end it first")  # fmt: skip
    for wipe in (False, True):
        with pytest.raises(TargetError) as err:
            carry_out(hosts.restart_action(spec.host, wipe=wipe))  # stays owed: exit 4
        assert str(err.value) == refused
    kill = HostKill(hosts, spec.host, restart=True, wipe=True, restart_action=None)
    with pytest.raises(InjectionError) as err:
        kill.revert()
    assert str(err.value) == f"restart {refused}"  # the member named once
    assert not marker.exists()
    assert _contents(data) == kept
    sandbox.cont(spec)
    assert carry_out(hosts.restart_action(spec.host, wipe=True)) == f"{spec.host}: already running"
    assert not marker.exists() and (data / "member.sqlite").exists()  # its data, not wiped


def test_a_killed_local_member_is_started_by_its_command(
    member: tuple[Sandbox, MemberSpec],
) -> None:
    """As before: nothing listening at its address, the member is started by its command, by
    recover and by the run's own revert."""
    sandbox, spec = member
    command = f"{sys.executable} -m rsdrill_emulator --dir {sandbox.directory} --host {spec.host}"
    hosts, _ = _local(sandbox, spec, command)
    action = hosts.restart_action(spec.host, wipe=False)
    sandbox.kill(spec)
    assert carry_out(action) == f"{spec.host}: restarted with `{command}`"
    assert answers_hello(spec.host, options=sandbox.connect_options)
    first = listening_pid(spec.port)
    assert first is not None
    hosts.kill(spec.host)
    HostKill(hosts, spec.host, restart=True, wipe=False, restart_action=action).revert()
    assert answers_hello(spec.host, options=sandbox.connect_options)
    assert listening_pid(spec.port) not in (None, first)


def test_a_forking_local_start_command_is_waited_for(member: tuple[Sandbox, MemberSpec]) -> None:
    """A daemonizing start command (mongod --fork) exits 0 once its member forked off: not a
    failure; the member is waited for as before."""
    sandbox, spec = member
    command = f"{sys.executable} -m rsdrill_emulator --dir {sandbox.directory} --host {spec.host}"
    forking = f"sh -c '{command} &'"
    hosts, _ = _local(sandbox, spec, forking)
    sandbox.kill(spec)
    try:
        assert carry_out(hosts.restart_action(spec.host, wipe=False)) == (
            f"{spec.host}: restarted with `{forking}`"
        )
        assert answers_hello(spec.host, options=sandbox.connect_options)
    finally:
        if listening_pid(spec.port) is not None:
            hosts.kill(spec.host)  # not the sandbox's recorded pid: its teardown would miss it


def test_a_local_start_command_that_fails_says_why_and_stays_owed(
    member: tuple[Sandbox, MemberSpec],
) -> None:
    """A start command exiting 1 (a member refusing its options): the run's revert and
    recover's fail at once with its status and stderr, the password it printed masked; the
    restart stays owed (recover exits 4)."""
    sandbox, spec = member
    script = "echo Error: mongodb://root:Hunter2pw@db0/ refused >&2; exit 1"
    hosts, _ = _local(sandbox, spec, f"sh -c '{script}'")
    action = hosts.restart_action(spec.host, wipe=False)
    hosts.kill(spec.host)
    why = (f"exited with status 1 before the member answered a hello (output in "
           f"{hosts.log_dir}")  # fmt: skip
    quoted = "\n    Error: mongodb://root:***@db0/ refused"
    began = time.monotonic()
    with pytest.raises(InjectionError) as err:
        HostKill(hosts, spec.host, restart=True, wipe=False, restart_action=action).revert()
    assert str(err.value).startswith(f"restart {spec.host}: its start command `sh -c ")
    with pytest.raises(TargetError) as owed:
        carry_out(action)
    assert time.monotonic() - began < 10  # not the minute a member is given to answer
    for message in (str(err.value), str(owed.value)):
        assert why in message and message.endswith(quoted) and "Hunter2pw" not in message


def test_recover_starts_every_member_it_can_when_one_is_frozen(
    replset: Callable[..., Sandbox],
) -> None:
    """A clock skew's recover (`local-start-each`) tries each member whatever the ones before
    did: a frozen first one is named and keeps the action owed, and the killed one after it is
    started all the same."""
    sandbox = replset("rs3")
    stuck, down = sandbox.spec.members[0], sandbox.spec.members[-1]
    command = f"{sys.executable} -m rsdrill_emulator --dir {sandbox.directory} --host {{}}"
    members = tuple(LocalMember(host=m.host, start=command.format(m.host)) for m in (stuck, down))
    hosts = LocalHosts(members, sandbox.directory.parent / "local-logs", sandbox.connect_options)
    starts = [hosts.restart_action(m.host, wipe=False) for m in (stuck, down)]
    action = {"action": "local-start-each", "starts": starts}
    sandbox.kill(down)
    pid = sandbox.stop(stuck)
    try:
        with pytest.raises(TargetError) as err:
            carry_out(action)  # stays owed: exit 4
        assert str(err.value) == (
            f"{stuck.host}: not started: its process (pid {pid}) holds its port but does not "
            f"answer a hello (a frozen process?); resume or end it first; {down.host}: "
            f"restarted with `{command.format(down.host)}`"
        )
        assert answers_hello(down.host, options=sandbox.connect_options)
    finally:
        sandbox.cont(stuck)
    assert carry_out(action) == f"{stuck.host}: already running; {down.host}: already running"
