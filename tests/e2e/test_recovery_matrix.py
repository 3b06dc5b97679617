"""The keep-versus-wipe sweep: a kept volume comes back in about the same time whatever the data
size; an empty one (initial sync) takes longer as the data grows (the published shape)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rsdrill.experiment.loader import load_experiment
from tests.harness.cli import rsdrill_run

CATALOG = Path(__file__).resolve().parents[2] / "experiments" / "recovery-keep-vs-wipe.yaml"


def test_catalog_sweep_is_the_documented_one() -> None:
    exp = load_experiment(CATALOG)
    assert exp.matrix is not None and exp.matrix.table is not None
    assert exp.matrix.parameters["faults.0.restart.volume"] == ("keep", "wipe")
    assert len(exp.variants()) == 6


@pytest.mark.slow
def test_keep_stays_flat_while_initial_sync_grows(tmp_path: Path) -> None:
    # The catalog experiment at smaller sizes, so the suite stays quick, and with the copy
    # capped as a disk or a network caps it: an uncapped copy runs as fast as the CPU allows, so
    # on a loaded machine a wiped member's fixed start-up costs outweigh the data (CI: 5 MB
    # 1.64 s, 60 MB 3.05 s) and the shape under test drowns in the machine's load. 30 MB at
    # 10 MB/s copies for 3 s, as 60 MB at 20 MB/s did, with half the data to load first.
    text = CATALOG.read_text().replace("[10, 40, 120]", "[3, 30]")
    text = text.replace("  data_mb: 10\n", "  data_mb: 10\n  initial_sync_mb_per_s: 10\n")
    assert "initial_sync_mb_per_s: 10" in text
    experiment = tmp_path / "kvw.yaml"
    experiment.write_text(text)
    out = tmp_path / "out"
    proc = rsdrill_run(
        ["run", str(experiment), "--out", str(out),
         "--no-live", "--no-history"],
        capture_output=True, text=True, timeout=900,
        env={**os.environ, "RSDRILL_HOME": str(tmp_path / "home")},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "| target.data_mb | faults.0.restart.volume=keep |" in proc.stdout
    rows = json.loads((out / "matrix.json").read_text())
    recovery = {
        (r["parameters"]["target.data_mb"], r["parameters"]["faults.0.restart.volume"]): max(
            r["metrics"]["recovery_s"].values()
        )
        for r in rows
    }
    keep_small, keep_big = recovery[3, "keep"], recovery[30, "keep"]
    wipe_small, wipe_big = recovery[3, "wipe"], recovery[30, "wipe"]
    assert abs(keep_big - keep_small) < 1.0, recovery
    assert wipe_big > 2 * wipe_small and wipe_big > keep_big + 1.0, recovery
