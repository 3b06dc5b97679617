"""`rsdrill soak` on the sandbox: a deliberately broken sandbox (w:majority acknowledged before
any secondary has the write) is caught and its schedule shrunk to at most 2 faults; one whose
secondaries skip an oplog entry is caught by the data audit; the correct sandbox passes three
seeded runs; the CLI prints progress and the replay command."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from rsdrill.engine.soak import replay_command, soak
from rsdrill.experiment.loader import load_experiment, load_experiment_text
from rsdrill.sandbox.config import SKIP_OPLOG_ENTRY_ENV, UNSAFE_MAJORITY_ACK_ENV
from tests.harness.cli import Rsdrill, rsdrill_run

pytestmark = pytest.mark.timeout(900)

# Faults on the primary only: every partition of it loses what the broken server acknowledged.
SOAK = """\
name: soak-test
target: {platform: sandbox, topology: rs3, election_timeout: 1s, heartbeat_interval: 200ms}
probes:
  availability: {interval: 20ms, timeout: 250ms, write_concern: majority}
observe: {after_revert: 5s, steady_state: 1s}
faults:
  random:
    kinds: [stepdown, host-freeze, network-partition]
    count: 3
    start: 1s
    within: 7.5s
    duration: [1s, 2s]
    select: [primary]
"""

# Its first run partitions the primary for 2 s at 1 s (more than an election): the broken
# sandbox loses writes there (with seed 5 the first violation came on run 4).
BROKEN_SEED = 22
# Not on seed 22: its first run steps the new primary down 0.6 s after the partition heals,
# with 1 s for a secondary to catch up, and under load the one that could had not yet left
# its partitioned sync source (2.4 s without one), so the stepdown was refused, as mongod may.
CORRECT_SEED = 5


@pytest.mark.slow
def test_a_broken_sandbox_is_found_and_shrunk_to_at_most_two_faults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(UNSAFE_MAJORITY_ACK_ENV, "1")
    lines: list[str] = []
    started = time.monotonic()
    report = soak(load_experiment_text(SOAK, "soak.yaml", {}), tmp_path, duration_s=600,
                  max_runs=8, seed=BROKEN_SEED, progress=lines.append)  # fmt: skip
    found_s = time.monotonic() - started
    print("\n".join(lines))
    assert report.violating is not None, "\n".join(lines)
    assert {v.invariant for v in report.violating.violations} & {"lost-write", "linearizable"}
    assert (report.violating.out_dir / "history.jsonl").exists()
    assert report.shrunk is not None and 1 <= len(report.shrunk) <= 2
    assert report.shrunk_file is not None
    shrunk = load_experiment(report.shrunk_file)
    assert [f.kind for f in shrunk.faults] == [f.kind for f in report.shrunk]
    assert shrunk.probes.consistency is not None
    size = len(report.shrunk)
    print(f"found after {report.found_after_s:.0f}s ({len(report.runs)} runs); shrunk to "
          f"{size} fault(s) in {report.shrink_runs} runs; {found_s:.0f}s in all")  # fmt: skip


@pytest.mark.slow
def test_a_secondary_that_skips_an_oplog_entry_is_found_by_the_audit_and_shrunk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Planted: each member leaves the 30th insert it applies as a secondary out of its data
    # (past the probes' set-up, inside the first seconds of writes at 50 per second).
    monkeypatch.setenv(SKIP_OPLOG_ENTRY_ENV, "30")
    lines: list[str] = []
    report = soak(load_experiment_text(SOAK, "soak.yaml", {}), tmp_path, duration_s=600,
                  max_runs=20, seed=CORRECT_SEED, progress=lines.append)  # fmt: skip
    print("\n".join(lines))
    assert report.violating is not None, "\n".join(lines)
    [divergence] = [v for v in report.violating.violations if v.invariant == "divergence"][:1]
    # The audit names the member, the probe's collection and the skipped document.
    assert "rsdrill_probe.run_" in divergence.detail and "_write (_id " in divergence.detail
    assert report.shrunk is not None and len(report.shrunk) == 1, report.shrunk
    assert f"{SKIP_OPLOG_ENTRY_ENV}=30 rsdrill run" in replay_command(Path("x.yaml"))


def test_the_correct_sandbox_breaks_nothing_on_seeded_runs(tmp_path: Path) -> None:
    assert os.environ.get(UNSAFE_MAJORITY_ACK_ENV) is None
    lines: list[str] = []
    report = soak(load_experiment_text(SOAK, "soak.yaml", {}), tmp_path, duration_s=600,
                  max_runs=3, seed=CORRECT_SEED, progress=lines.append)  # fmt: skip
    assert report.violating is None, "\n".join(lines)
    assert len(report.runs) == 3
    errors = [f"run {r.index}: {r.verdict}: {r.error}" for r in report.runs
              if r.verdict not in ("pass", "fail")]  # fmt: skip
    assert not errors, "\n".join(lines + errors)
    # Passing runs leave nothing behind; the soak keeps only what a violation needs.
    assert not list(tmp_path.glob("run-*"))


def test_the_cli_prints_progress_and_the_replay_command(tmp_path: Path) -> None:
    path = tmp_path / "soak.yaml"
    document = yaml.safe_load(SOAK)
    document["faults"]["random"].update(kinds=["network-partition"], count=1, within="3s")
    path.write_text(yaml.safe_dump(document))
    env = {**os.environ, UNSAFE_MAJORITY_ACK_ENV: "1"}
    done = rsdrill_run(
        ["soak", str(path), "--runs", "2",
         "--out", str(tmp_path / "out"), "--seed", "1"],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "run 1 seed " in done.stdout
    assert "runs/h" in done.stdout
    assert f"replay: {UNSAFE_MAJORITY_ACK_ENV}=1 rsdrill run {path} --seed " in done.stdout
    assert "replay the shrunk schedule: " in done.stdout
    # One line a run: the runs' own events (phases, guards, faults) are in their events.log.
    assert "phase: " not in done.stdout + done.stderr, done.stdout + done.stderr
    kept = list((tmp_path / "out").glob("run-*/events.log"))
    assert kept and all("phase: faults" in log.read_text() for log in kept), kept


def test_sigterm_ends_the_soak_after_reverting_the_run_it_came_in(tmp_path: Path) -> None:
    # Not a violation to shrink: the run's faults are reverted, its history is not judged, no
    # other run starts, and the status says aborted.
    path = tmp_path / "soak.yaml"
    document = yaml.safe_load(SOAK)
    document["faults"]["random"].update(kinds=["host-freeze"], count=1, within="2s",
                                        duration=["20s", "20s"])  # fmt: skip
    path.write_text(yaml.safe_dump(document))
    out = tmp_path / "out"
    proc = Rsdrill(
        ["soak", str(path), "--runs", "5",
         "--out", str(out), "--seed", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        events = out / "run-00001" / "events.log"
        deadline = time.monotonic() + 120
        while not (events.exists() and "injected host-freeze" in events.read_text()):
            assert proc.poll() is None and time.monotonic() < deadline, "no fault injected"
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 3, stdout + stderr
    assert "stopped by SIGTERM" in stdout and "run 2 seed" not in stdout, stdout
    assert "Traceback" not in stderr, stderr
    assert "reverted host-freeze" in events.read_text()
    left = subprocess.run(["pgrep", "-f", f"rsdrill_emulator --dir {out}"], capture_output=True)
    assert left.returncode == 1, left.stdout


def test_verbose_soak_prints_each_runs_events(tmp_path: Path) -> None:
    path = tmp_path / "soak.yaml"
    document = yaml.safe_load(SOAK)
    document["faults"]["random"].update(kinds=["stepdown"], count=1, within="2s")
    path.write_text(yaml.safe_dump(document))
    done = rsdrill_run(
        ["soak", str(path), "--runs", "1", "-v",
         "--out", str(tmp_path / "out"), "--seed", "1"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "phase: faults" in done.stderr and "injected stepdown" in done.stderr, done.stderr
    assert "run 1 seed " in done.stdout


def test_a_file_without_a_random_schedule_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "fixed.yaml"
    path.write_text(
        "name: fixed\ntarget: {platform: sandbox}\nfaults:\n  - {at: 1s, kind: stepdown}\n"
    )
    done = rsdrill_run(["soak", str(path)],
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2
    assert "needs `faults: {random: ...}`" in done.stderr
    assert "Traceback" not in done.stderr
