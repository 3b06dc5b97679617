"""A step's processes are journaled and stopped by `rsdrill recover`, never a stranger's."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from rsdrill.engine.actions import carry_out
from rsdrill.engine.steps import StepFailed, run_step, stop_step, stop_step_action
from rsdrill.experiment.schema import Step


def _alive(proc: subprocess.Popen[bytes]) -> bool:
    return proc.poll() is None


def test_recover_stops_a_steps_whole_process_group_once() -> None:
    # The shell and its child share the group, as a restore tool started by a step would.
    proc = subprocess.Popen(["/bin/sh", "-c", "sleep 60 & wait"], start_new_session=True)
    action = stop_step_action("restore", proc.pid)
    assert carry_out(action) == f"step restore: stopped (process group {proc.pid})"
    proc.wait(timeout=10)
    assert stop_step(action) == "step restore: not running"


def test_a_reused_pid_is_not_signalled() -> None:
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        action = {**stop_step_action("backup", proc.pid), "started": 1}  # another process's
        assert stop_step(action) == "step backup: not running"
        time.sleep(0.1)
        assert _alive(proc)
    finally:
        proc.kill()
        proc.wait()


def test_a_failed_steps_error_quotes_its_last_line_masked(tmp_path: Path) -> None:
    run = "echo dumping; echo cannot reach mongodb://u:S3cretPw@db1/ >&2; exit 7"
    with pytest.raises(StepFailed) as failed:
        run_step(Step(at=0, name="backup", run=run), {}, tmp_path, time.sleep)
    assert str(failed.value) == (
        "step backup exited with status 7: cannot reach mongodb://u:***@db1/ "
        f"(see {tmp_path / 'backup.log'})"
    )
