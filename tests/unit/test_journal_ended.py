"""A run's journal finished by `rsdrill recover --force` while the run goes on (hung, stopped,
in another pid namespace): the run puts nothing more in force. Real files, real flocks; the
recover's side is a second `Journal` on the same file, as the command opens it."""

from __future__ import annotations

import fcntl
import json
import subprocess
import threading
import time
from pathlib import Path

import pytest

from rsdrill.engine.journal import Journal, JournalEnded, read_records
from rsdrill.engine.steps import run_step
from rsdrill.errors import InjectionError
from rsdrill.experiment.schema import Step


def _run_journal(tmp_path: Path) -> Journal:
    journal = Journal.open_run("20261205T000000Z-x", "x", directory=tmp_path)
    journal.write("intent", key="fault:0:h:1", revert={"action": "fail-command-off"})
    return journal


def _types(path: Path) -> list[str]:
    return [r["type"] for r in read_records(path)]


def test_a_journal_ended_by_a_recover_refuses_the_next_fault(tmp_path: Path) -> None:
    run = _run_journal(tmp_path)
    recover = Journal(run.path, create=False)
    recover.lock(0, print)
    recover.write("reverted", key="fault:0:h:1")
    recover.write("end", verdict="recovered")
    recover.close()

    with pytest.raises(JournalEnded, match="finished by `rsdrill recover --force`") as ended:
        run.write("intent", key="fault:1:h:1", revert={"action": "fail-command-off"})
    assert isinstance(ended.value, InjectionError)  # the run's verdict: error, reverted
    assert _types(run.path) == ["run", "intent", "reverted", "end"]
    # From then on the run's own reverts and end are written as they come, unchecked.
    run.write("reverted", key="fault:0:h:1")
    run.write("applied", key="fault:0:h:1")
    assert _types(run.path)[-2:] == ["reverted", "applied"]
    run.close()


def test_records_another_writes_without_an_end_do_not_stop_the_run(tmp_path: Path) -> None:
    run = _run_journal(tmp_path)
    other = Journal(run.path, create=False)
    other.write("forgotten", key="fault:0:h:1", by="someone@host")
    other.close()
    run.write("intent", key="fault:1:h:1", revert={"action": "fail-command-off"})
    run.write("applied", key="fault:1:h:1")
    assert _types(run.path) == ["run", "intent", "forgotten", "intent", "applied"]
    run.close()


def test_the_next_fault_waits_for_a_recover_holding_the_lock(tmp_path: Path) -> None:
    """A recover reverting (lock held) decides what the run may do next: the run's record
    waits for it and then finds its end."""
    run = _run_journal(tmp_path)
    with run.path.open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        outcome: list[BaseException | None] = []

        def inject() -> None:
            try:
                run.write("intent", key="fault:1:h:1", revert={"action": "fail-command-off"})
                outcome.append(None)
            except JournalEnded as exc:
                outcome.append(exc)

        thread = threading.Thread(target=inject)
        thread.start()
        time.sleep(0.3)
        assert thread.is_alive() and outcome == []  # waiting, nothing written
        assert _types(run.path) == ["run", "intent"]
        held.write(json.dumps({"type": "end", "verdict": "recovered"}) + "\n")
        held.flush()
        fcntl.flock(held, fcntl.LOCK_UN)
        thread.join(10)
    assert len(outcome) == 1 and isinstance(outcome[0], JournalEnded)
    assert _types(run.path) == ["run", "intent", "end"]
    run.close()


def test_a_step_whose_record_is_refused_is_stopped(tmp_path: Path) -> None:
    marker = tmp_path / "still-running"
    step = Step(name="restore", at="0s", run=f"sleep 0.5; touch {marker}; sleep 30", timeout=60)
    started: list[int] = []

    def refused(action: dict[str, object]) -> None:
        started.append(int(str(action["pgid"])))
        raise JournalEnded(tmp_path / "run.jsonl")

    with pytest.raises(JournalEnded):
        run_step(step, {}, tmp_path / "steps", time.sleep, refused)
    time.sleep(1.0)
    assert not marker.exists()  # stopped before it got that far
    alive = subprocess.run(["kill", "-0", str(started[0])], capture_output=True)
    assert alive.returncode != 0
