"""A run in a thread, something done to it from outside while its fault is in force (a
monitoring source set off, an alarm raised), and the time from that to the run's revert."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from rsdrill.engine.options import RunOptions
from rsdrill.engine.runner import run_experiment
from rsdrill.experiment.schema import Experiment
from rsdrill.result import Result


def run_acting(
    exp: Experiment,
    out: Path,
    after_s: float,
    act: Callable[[], float | None],
    timeout_s: float = 180.0,
) -> tuple[Result | None, float]:
    """Run `exp`; `after_s` after its probes began (its `faults` phase), `act()`, which may
    return the moment (monotonic) it acted, else its return is that moment. The result (None
    if the run did not end within `timeout_s`) and the seconds from that moment to the run's
    revert phase (infinite without one)."""
    phases: dict[str, float] = {}

    def entered(name: str) -> None:
        phases.setdefault(name, time.monotonic())

    options = RunOptions(out_dir=out, live=False, journal_dir=out.parent / "journal",
                         on_phase=entered)  # fmt: skip
    done: list[Result] = []
    runner = threading.Thread(target=lambda: done.append(run_experiment(exp, options)))
    runner.start()
    while "faults" not in phases and runner.is_alive():
        time.sleep(0.02)
    time.sleep(max(0.0, phases.get("faults", time.monotonic()) + after_s - time.monotonic()))
    moment = act()
    acted = time.monotonic() if moment is None else moment
    runner.join(timeout=timeout_s)
    return (done[0] if done else None), phases.get("revert", float("inf")) - acted
