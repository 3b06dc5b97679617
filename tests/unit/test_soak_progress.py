"""The soak's terminal lines: a run that ends in an error says why and where it was kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from rsdrill.engine import soak as soak_module
from rsdrill.engine.soak import RunVerdict, soak
from rsdrill.experiment.loader import load_experiment

SOAK_FILE = Path(__file__).resolve().parents[2] / "experiments" / "soak-rs3.yaml"


def test_an_error_run_prints_its_reason_and_keeps_its_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def ended_in_error(exp: object, out_dir: Path, index: int, seed: int | None,
                       recovery_slo_s: float, gate: object = None) -> RunVerdict:  # fmt: skip
        out_dir.mkdir(parents=True)
        return RunVerdict(index, seed, "error", [], 0.8, out_dir, "port 20877 is in use")

    monkeypatch.setattr(soak_module, "run_checked", ended_in_error)
    lines: list[str] = []
    report = soak(load_experiment(SOAK_FILE), tmp_path, duration_s=60, max_runs=1, seed=1,
                  progress=lines.append)  # fmt: skip
    assert report.runs[0].verdict == "error"
    assert lines[1] == f"  error: port 20877 is in use (kept in {tmp_path / 'run-00001'})"
    assert (tmp_path / "run-00001").is_dir()
