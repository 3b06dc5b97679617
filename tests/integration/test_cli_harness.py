"""The tests' `rsdrill` processes (tests/harness/cli.py) are forked from a zygote that has made
the command line's imports: each must still be the process `python -m rsdrill.cli ARGS` started
by exec would be, as every test that runs the CLI assumes: same output and exit status, its own
pid, signals, stdin, working directory and environment; started by exec where a fork could not
be the same."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from rsdrill.procstat import stat_fields
from tests.harness import cli as harness
from tests.harness.cli import CLI, ROOT, Rsdrill, rsdrill_run, signal_sets

EXPERIMENT = ROOT / "experiments" / "rs3-stepdown.yaml"


def _parent(pid: int) -> int:
    fields = stat_fields(pid)
    assert fields is not None, f"no process {pid}"
    return int(fields[1])


def _exec(args: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60, **kwargs)


@pytest.mark.parametrize(
    "args",
    [["validate", str(EXPERIMENT)], ["validate", "no-such-file.yaml"], ["faults"],
     ["run", "--no-such-option"], ["recover", "--dry-run"]],
)  # fmt: skip
def test_a_forked_command_prints_and_exits_as_an_execd_one(args: list[str], tmp_path: Path) -> None:
    # The environment is the caller's: `recover` names the journals under RSDRILL_HOME.
    env = {**os.environ, "RSDRILL_HOME": str(tmp_path / "home")}
    forked = rsdrill_run(args, capture_output=True, text=True, timeout=60, env=env)
    execd = _exec(args, env=env)
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        execd.returncode, execd.stdout, execd.stderr,
    )  # fmt: skip


def test_a_forked_process_is_its_own_and_reads_the_callers_stdin_and_directory(
    tmp_path: Path,
) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "e.yaml").write_text(EXPERIMENT.read_text())
    process = Rsdrill(["validate", "e.yaml", "/dev/stdin"], cwd=tmp_path / "in",
                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                      text=True)  # fmt: skip
    try:
        zygote = _parent(process.pid)
        assert zygote != os.getpid()  # forked, not exec'd by this process
        assert b"tests.harness.cli_zygote" in Path(f"/proc/{zygote}/cmdline").read_bytes()
        argv = Path(f"/proc/{process.pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
        assert argv == [os.fsencode(a) for a in [*CLI, "validate", "e.yaml", "/dev/stdin"]]
        assert Path(f"/proc/{process.pid}/cwd").resolve() == (tmp_path / "in").resolve()
        assert os.getpgid(process.pid) == os.getpgid(0)  # the caller's group, as exec's child
        stdout, stderr = process.communicate("name: [", timeout=60)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == 2, stderr
    assert "e.yaml: ok" in stdout and stderr.startswith("/dev/stdin:")
    # Reaped by the zygote once it ended: nothing left of it.
    assert stat_fields(process.pid) is None


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_a_signal_ends_a_forked_process_as_it_ends_an_execd_one(sig: signal.Signals) -> None:
    """Both wait on stdin until the signal comes. This process handles SIGINT meanwhile: one
    that ignores it (a background job of a shell) passes that on to both."""
    outcomes = []
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    for start in (Rsdrill, lambda args, **kw: subprocess.Popen([*CLI, *args], **kw)):
        process = start(["validate", "/dev/stdin"], stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                        start_new_session=True)  # fmt: skip
        assert os.getsid(process.pid) == process.pid
        time.sleep(2.0)  # its imports done (the exec'd one's) and reading
        process.send_signal(sig)
        # Ended by the signal before its stdin closes: communicate() closes it at once, and a
        # command that read the end first would exit 2 on an empty file instead.
        process.wait(timeout=60)
        stdout, stderr = process.communicate(timeout=60)
        outcomes.append((process.returncode, stdout, stderr))
    signal.signal(signal.SIGINT, handler)
    assert outcomes[0] == outcomes[1]
    # SIGINT: rsdrill's own quiet exit (130); the others end the process by the signal itself.
    assert outcomes[0][0] == {signal.SIGINT: 130, signal.SIGTERM: -signal.SIGTERM,
                              signal.SIGKILL: -signal.SIGKILL}[sig]  # fmt: skip


def _reading_stdin(pid: int) -> None:
    """Waits until the process is blocked in read(2) on its stdin's pipe (`/dev/stdin` opened
    again), which the command does once it has started."""
    deadline = time.monotonic() + 60.0
    while True:
        number, fd = [*Path(f"/proc/{pid}/syscall").read_text().split(), "", ""][:2]
        with contextlib.suppress(OSError, ValueError):
            if number == "0" and os.readlink(f"/proc/{pid}/fd/{int(fd, 16)}") == os.readlink(
                f"/proc/{pid}/fd/0"
            ):
                return
        assert time.monotonic() < deadline, f"process {pid} never read its stdin"
        time.sleep(0.05)


def test_a_forked_process_starts_with_the_signals_an_execd_one_would(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its zygote started while this process ignored SIGINT (a command run here in-process once
    left it so); now it handles SIGINT, ignores SIGHUP and blocks SIGUSR1: what exec would
    pass on now, not what held when the zygote started."""
    monkeypatch.setattr(harness, "_zygote", None)  # this test's own, started below
    handler = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        rsdrill_run(["--version"], capture_output=True, timeout=60, check=True)
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)  # whatever it was before
    zygote = harness._zygote
    assert zygote is not None and signal.SIGINT in signal_sets(zygote.process.pid)["SigIgn"]
    hangup = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    seen = []
    try:
        for start in (Rsdrill, lambda args, **kw: subprocess.Popen([*CLI, *args], **kw)):
            process = start(["validate", "/dev/stdin"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
            try:
                _reading_stdin(process.pid)
                seen.append(signal_sets(process.pid))
            finally:
                process.kill()
                process.communicate()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        signal.signal(signal.SIGHUP, hangup)
        zygote.close()
        signal.signal(signal.SIGINT, handler)
    assert seen[0] == seen[1]
    assert signal.SIGHUP in seen[0]["SigIgn"] and signal.SIGINT not in seen[0]["SigIgn"]
    assert signal.SIGUSR1 in seen[0]["SigBlk"] and signal.SIGINT in seen[0]["SigCgt"]


def test_a_run_out_of_time_is_killed() -> None:
    read, write = os.pipe()  # held open: the command waits on it
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            rsdrill_run(["validate", "/dev/stdin"], stdin=read, timeout=1.0)
    finally:
        os.close(read)
        os.close(write)


def test_an_environment_python_reads_at_start_gets_an_execd_process() -> None:
    env = {**os.environ, "PYTHONHASHSEED": "7"}
    process = Rsdrill(["validate", "/dev/stdin"], stdin=subprocess.PIPE, env=env)
    try:
        assert _parent(process.pid) == os.getpid()
    finally:
        process.kill()
        process.wait()
    assert process.returncode == -signal.SIGKILL
