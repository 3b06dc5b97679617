"""`rsdrill soak`: many short runs of one experiment, each with a fresh seed for its random
schedule, each history checked against the invariants (see `rsdrill/analysis/invariants.py`).

On the first violation the soak stops, keeps that run's directory (its history.jsonl and
result.json), and shrinks the schedule: it drops faults one at a time and halves durations
while the violation still shows, and writes the smallest schedule it found as an experiment
file with the command that replays it. Each candidate is tried up to `attempts` times, since a
fault's timing decides whether a race is hit.
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import yaml

from rsdrill.analysis.invariants import (
    Violation,
    audit_violations,
    check_invariants,
    unaccounted_losses,
)
from rsdrill.engine.live import LiveView
from rsdrill.engine.options import RunGate, RunOptions
from rsdrill.engine.runner import Runner
from rsdrill.engine.stop_watch import EXIT_STOPPED
from rsdrill.experiment.probes import RegisterProbe
from rsdrill.experiment.schema import Experiment, Fault
from rsdrill.sandbox.config import PLANTED_ENVS

MIN_SHRUNK_DURATION_S = 0.5
DURATION_HALVINGS = 3


@dataclass
class RunVerdict:
    """One soak run: its seed, how it ended and what it broke."""

    index: int
    seed: int | None
    verdict: str
    violations: list[Violation]
    seconds: float
    out_dir: Path
    error: str | None = None
    stopped_by: str | None = None
    """The signal, or the fleet's stop, that ended the run (its history is cut short: not
    checked)."""
    exit_code: int = 0


@dataclass
class SoakReport:
    runs: list[RunVerdict] = field(default_factory=list)
    elapsed_s: float = 0.0
    violating: RunVerdict | None = None
    shrunk: list[Fault] | None = None
    shrunk_file: Path | None = None
    shrink_runs: int = 0
    found_after_s: float | None = None
    stopped_by: str | None = None
    """SIGINT/SIGTERM or the fleet's stop lever: the soak ended after the run it came in
    (reverted), with no shrinking."""
    stopped_exit: int = 0  # that run's exit status

    @property
    def runs_per_hour(self) -> float:
        return len(self.runs) * 3600 / self.elapsed_s if self.elapsed_s else 0.0


def soak_experiment(exp: Experiment) -> Experiment:
    """The experiment as a soak runs it: with the register probe the invariants read."""
    if exp.probes.consistency is not None:
        return exp
    probes = exp.probes.model_copy(update={"consistency": RegisterProbe()})
    return exp.model_copy(update={"probes": probes})


def run_checked(
    exp: Experiment,
    out_dir: Path,
    index: int,
    seed: int | None,
    recovery_slo_s: float,
    gate: RunGate | None = None,
) -> RunVerdict:
    """One run of `exp` (already seeded), its history checked; under the fleet's `gate`."""
    started = time.monotonic()
    options = RunOptions(out_dir=out_dir, live=False, assume_yes=True, gate=gate)
    runner = Runner(soak_experiment(exp), options)
    out_dir.mkdir(parents=True, exist_ok=True)
    with (out_dir / "events.log").open("w") as events, _run_events_to(events):
        runner.live = LiveView(runner.history, stream=events)
        result = runner.run()
    violations = []
    fleet_stop = result.error if result.exit_code == EXIT_STOPPED else None
    stopped_by = runner.signalled or fleet_stop
    if stopped_by is None and result.verdict in ("pass", "fail"):  # its history is whole
        ops = runner.history.ops()
        # What the ledger's acknowledgement promised: w:majority, that the write survives
        # (lost-write); w:1 with j:true, that only a rollback takes it, into a file.
        ledger = exp.probes.durability
        majority = ledger is not None and ledger.write_concern == "majority"
        violations = check_invariants(
            ops, runner.state.records,
            lost_acknowledged=result.metrics.lost_acknowledged_seqs if majority else [],
            recovery_slo_s=recovery_slo_s,
            transactions_model=exp.probes.transactions_model,
        )  # fmt: skip
        violations += audit_violations(result.audit)
        if ledger is not None and (majority or ledger.journal):
            violations += unaccounted_losses(ops, result.audit)
    return RunVerdict(index, seed, result.verdict, violations, time.monotonic() - started,
                      out_dir, result.error, stopped_by, result.exit_code)  # fmt: skip


@contextmanager
def _run_events_to(stream: TextIO) -> Iterator[None]:
    """A run's events (logger `rsdrill.run`: phases, guards, faults) also in its events.log,
    with the run's clock; the terminal shows the soak's progress, one line a run."""
    handler = logging.StreamHandler(stream)
    handler.setFormatter(_EventLine())
    logger = logging.getLogger("rsdrill.run")
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)


class _EventLine(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        t_s = getattr(record, "run_t_s", None)
        return (f"t+{t_s:7.2f}s " if t_s is not None else "") + record.getMessage()


def soak(
    exp: Experiment,
    out_dir: Path,
    *,
    duration_s: float,
    max_runs: int | None = None,
    recovery_slo_s: float = 30.0,
    attempts: int = 2,
    seed: int | None = None,
    progress: Callable[[str], None] = print,
    gate: RunGate | None = None,
) -> SoakReport:
    """Run until `duration_s` has passed (or `max_runs`), or an invariant breaks; then shrink."""
    if exp.random_faults is None:
        raise ValueError("rsdrill soak needs `faults: {random: ...}`: each run draws its own")
    seeds = random.Random(seed)
    report = SoakReport()
    start = time.monotonic()
    index = 0
    while time.monotonic() - start < duration_s and (max_runs is None or index < max_runs):
        index += 1
        run_seed = seeds.randrange(2**32)
        run_dir = out_dir / f"run-{index:05d}"
        verdict = run_checked(exp.with_seed(run_seed), run_dir, index, run_seed, recovery_slo_s,
                              gate)  # fmt: skip
        report.runs.append(verdict)
        report.elapsed_s = time.monotonic() - start
        violations = len([r for r in report.runs if r.violations])
        errors = len([r for r in report.runs if r.verdict in ("error", "aborted")])
        note = ", ".join(v.invariant for v in verdict.violations) or verdict.verdict
        progress(f"run {index} seed {run_seed}: {note} ({verdict.seconds:.1f}s) | "
                 f"{index} runs, {violations} violating, {errors} errors, "
                 f"{report.runs_per_hour:.0f} runs/h")  # fmt: skip
        if verdict.stopped_by is not None:
            report.stopped_by, report.stopped_exit = verdict.stopped_by, verdict.exit_code
            progress(f"  stopped by {verdict.stopped_by}; its faults reverted (kept in {run_dir})")
            break
        if verdict.violations:
            report.violating = verdict
            report.found_after_s = report.elapsed_s
            for v in verdict.violations:
                progress(f"  {v.invariant}: {v.detail}")
            break
        if verdict.verdict in ("error", "aborted"):
            # Kept to read; the reason on the terminal, as a violation's is.
            progress(f"  {verdict.verdict}: {verdict.error or 'no reason recorded'} "
                     f"(kept in {run_dir})")  # fmt: skip
        else:
            shutil.rmtree(run_dir, ignore_errors=True)
    if report.violating is not None:
        try:
            _shrink(exp.with_seed(report.violating.seed or 0), out_dir, report, recovery_slo_s,
                    attempts, progress, gate)  # fmt: skip
        except _Stopped as stopped:
            report.stopped_by = str(stopped)
            progress(f"  stopped by {stopped} while shrinking; its faults reverted")
    return report


class _Stopped(Exception):
    """A shrinking run received SIGINT/SIGTERM: the soak ends there."""


def _with_faults(exp: Experiment, faults: list[Fault]) -> Experiment:
    return exp.model_copy(update={"faults": tuple(faults), "random_faults": None})


def _shrink(
    exp: Experiment,
    out_dir: Path,
    report: SoakReport,
    recovery_slo_s: float,
    attempts: int,
    progress: Callable[[str], None],
    gate: RunGate | None,
) -> None:
    """Drop faults, then halve durations, keeping each change that still violates."""
    wanted = {v.invariant for v in report.violating.violations} if report.violating else set()

    def violates(faults: list[Fault]) -> bool:
        for _ in range(attempts):
            report.shrink_runs += 1
            run_dir = out_dir / f"shrink-{report.shrink_runs:03d}"
            verdict = run_checked(_with_faults(exp, faults), run_dir, report.shrink_runs, None,
                                  recovery_slo_s, gate)  # fmt: skip
            shutil.rmtree(run_dir, ignore_errors=True)
            if verdict.stopped_by is not None:
                raise _Stopped(verdict.stopped_by)
            if {v.invariant for v in verdict.violations} & wanted:
                return True
        return False

    faults = list(exp.faults)
    i = 0
    while i < len(faults) and len(faults) > 1:
        candidate = faults[:i] + faults[i + 1 :]
        if violates(candidate):
            progress(f"shrink: dropped {faults[i].kind} at {faults[i].at:g}s "
                     f"({len(candidate)} fault(s) left)")  # fmt: skip
            faults = candidate
        else:
            i += 1
    for i, fault in enumerate(faults):
        for _ in range(DURATION_HALVINGS):
            if fault.duration is None or fault.duration / 2 < MIN_SHRUNK_DURATION_S:
                break
            shorter = fault.model_copy(update={"duration": round(fault.duration / 2, 2)})
            candidate = [*faults[:i], shorter, *faults[i + 1 :]]
            if not violates(candidate):
                break
            progress(f"shrink: {fault.kind} lasts {shorter.duration:g}s")
            faults, fault = candidate, shorter
    report.shrunk = faults
    report.shrunk_file = out_dir / "shrunk.yaml"
    document = soak_experiment(_with_faults(exp, faults)).model_dump(
        mode="json", exclude_defaults=True, exclude={"random_faults"}
    )
    report.shrunk_file.write_text(
        "# The smallest schedule rsdrill soak found that still breaks an invariant.\n"
        + yaml.safe_dump(document, sort_keys=False)
    )


def replay_command(file: Path, seed: int | None = None) -> str:
    """The command that replays a run (with the test-only switches that were on)."""
    env = "".join(f"{name}={os.environ[name]} " for name in PLANTED_ENVS if os.environ.get(name))
    seeded = f" --seed {seed}" if seed is not None else ""
    return f"{env}rsdrill run {file}{seeded}"
