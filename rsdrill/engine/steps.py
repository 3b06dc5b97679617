"""Running an experiment's steps: the user's own commands (a backup, a restore) at their moment
of the timeline, with a deadline, their output kept, and an interrupt stopping them."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from rsdrill import registry
from rsdrill.environ import environ_copy
from rsdrill.errors import RsdrillError
from rsdrill.experiment.schema import Step
from rsdrill.logtail import last_line
from rsdrill.procstat import stat_fields

if TYPE_CHECKING:
    from rsdrill.platforms.base import RunTarget

POLL_S = 0.1
KILL_GRACE_S = 5.0


class StepFailed(RsdrillError):
    """A step exited non-zero or outlasted its timeout; the run ends with an error."""


def step_environment(target: RunTarget, out_dir: Path) -> dict[str, str]:
    """What a step's command finds in its environment besides the run's own: the target and
    the output directory (and the directory of a set the run built), and this installation's
    `rsdrill` first on PATH."""
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    env = {"RSDRILL_URI": target.uri, "RSDRILL_OUT": str(out_dir.resolve()), "PATH": path}
    built = getattr(target, "directory", None)
    if built is not None and registry.member_source(target.platform) == "built":
        env["RSDRILL_SANDBOX"] = str(Path(built).resolve())
    return env


def run_step(
    step: Step,
    extra_env: Mapping[str, str],
    log_dir: Path,
    wait: Callable[[float], None],
    on_start: Callable[[dict[str, object]], None] = lambda _action: None,
) -> int:
    """Run the step's command to its end; its exit status (0). `wait(seconds)` sleeps between
    polls and raises to interrupt the run, which stops the command (its process group).
    `on_start` gets the revert action that stops it, for the journal: a run that dies must not
    leave its step going (a restore that starts members after `rsdrill recover` stopped them)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{step.name}.log"
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            ["/bin/sh", "-c", step.run],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            env={**environ_copy(), **extra_env}, start_new_session=True,
        )  # fmt: skip
    deadline = time.monotonic() + step.timeout
    try:
        # Inside: a journal that refuses the record (ended by a recover) stops the step too.
        on_start(stop_step_action(step.name, process.pid))
        while process.poll() is None:
            if time.monotonic() >= deadline:
                raise StepFailed(
                    f"step {step.name} did not finish within {step.timeout:g}s (see {log_path})"
                )
            wait(POLL_S)
    finally:
        if process.poll() is None:
            _stop(process)
    if process.returncode != 0:
        last = last_line(log_path)[:300]
        raise StepFailed(
            f"step {step.name} exited with status {process.returncode}"
            + (f": {last}" if last else "")
            + f" (see {log_path})"
        )
    return process.returncode


def stop_step_action(name: str, pid: int) -> dict[str, object]:
    """The journal's record of a running step: its process group and the leader's start time
    (so a later `recover` never signals a reused pid)."""
    return {"action": "stop-step", "step": name, "pgid": pid, "started": _start_time(pid)}


def stop_step(action: dict[str, object]) -> str:
    """Stop a step's process group if it is still the one the journal names (idempotent)."""
    pgid = int(str(action["pgid"]))
    if _start_time(pgid) != action.get("started"):
        return f"step {action['step']}: not running"
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    return f"step {action['step']}: stopped (process group {pgid})"


def _start_time(pid: int) -> int | None:
    """The process's start time (clock ticks since boot), or None when it is gone."""
    fields = stat_fields(pid)
    return None if fields is None else int(fields[19])


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the step's process group, SIGKILL it if it lingers."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(KILL_GRACE_S)
            return
        except subprocess.TimeoutExpired:
            continue
