"""What tests/e2e/test_run_storage.py, test_run_storage_slow.py and test_run_mirror.py share: a
run of an experiment with its output under the test's directory, and when its first fault was
injected."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rsdrill.engine.options import RunOptions
from rsdrill.engine.runner import run_experiment
from rsdrill.experiment.schema import Experiment
from rsdrill.result import Result


def run(tmp_path: Path, spec: dict[str, Any]) -> Result:
    return run_experiment(
        Experiment.model_validate(spec),
        RunOptions(out_dir=tmp_path / "out", live=False, journal_dir=tmp_path, assume_yes=True),
    )


def injected_mono(result: Result) -> float:
    assert result.clock is not None and result.faults[0].injected_at_s is not None
    return result.clock.t0_monotonic + result.faults[0].injected_at_s
