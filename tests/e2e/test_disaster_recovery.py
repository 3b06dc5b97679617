"""A disaster-recovery drill end to end on the sandbox: backup, every member's data lost,
restore; RTO and RPO measured against what the ledger really lost."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from rsdrill.sandbox.cluster import Sandbox
from tests.harness.cli import rsdrill_run

DRILL = Path(__file__).parents[2] / "experiments" / "rs3-disaster-recovery-drill.yaml"


def _run(tmp_path: Path, experiment: Path) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp_path / "out"
    done = rsdrill_run(
        ["run", str(experiment), "--out", str(out),
         "--no-live", "--no-history", "--yes"],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "RSDRILL_HOME": str(tmp_path / "home")},
    )  # fmt: skip
    return done, out


def _fast_drill(tmp_path: Path, **replace: str) -> Path:
    text = DRILL.read_text().replace(
        "target: {platform: sandbox, topology: rs3}",
        "target: {platform: sandbox, topology: rs3, election_timeout: 1s}",
    )
    # The file's timeline, compressed: backup at 2 s, data lost at 6 s, restore at 7 s.
    for old, new in (("at: 5s", "at: 2s"), ("at: 15s", "at: 6s"), ("at: 17s", "at: 7s")):
        assert old in text
        text = text.replace(old, new)
    for old, new in replace.items():
        assert old in text
        text = text.replace(old, new)
    path = tmp_path / "drill.yaml"
    path.write_text(text)
    return path


@pytest.mark.slow
def test_drill_measures_rto_and_loses_only_writes_after_the_backup(tmp_path: Path) -> None:
    done, out = _run(tmp_path, _fast_drill(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads((out / "result.json").read_text())
    metrics = result["metrics"]
    ops = [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines()]
    steps = {o["op"]: o for o in ops if o["probe"] == "step"}
    disaster = max(f["injected_at_s"] for f in result["faults"] if f["kind"] == "data-loss")
    # The ledger's inserts are the probe its readback names (the availability probe's writes
    # when the ledger shares them).
    readback = next(o for o in ops if o["probe"] == "ledger" and o["op"] == "readback")
    source = readback["detail"].get("of", "ledger")
    inserts = [o for o in ops if o["probe"] == source and o["op"] == "insert"]
    assert inserts
    acked = {o["detail"]["seq"]: o["t_end"] for o in inserts if o["outcome"] == "ok"}
    lost = set(metrics["lost_acknowledged_seqs"])
    # The backup holds everything acknowledged before it began and nothing after it ended.
    assert all(t > steps["backup"]["t_start"] for s, t in acked.items() if s in lost)
    after = {s for s, t in acked.items() if steps["backup"]["t_end"] < t <= disaster}
    assert after and after <= lost
    assert metrics["lost_before_backup"] == 0
    # The set took writes again only after the restore step brought the members back.
    restore = steps["restore"]
    assert metrics["restore_s"] == pytest.approx(restore["t_end"] - restore["t_start"])
    assert disaster + metrics["rto_s"] > restore["t_start"]
    assert metrics["rto_s"] < 60
    # RPO: the data lost spans from the backup's snapshot (during its step) to the disaster.
    assert disaster - steps["backup"]["t_end"] - 0.5 <= metrics["rpo_s"]
    assert metrics["rpo_s"] <= disaster - steps["backup"]["t_start"] + 0.5
    assert not Sandbox(out / "sandbox").running()


def test_data_loss_without_a_restore_step_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: no-restore\ntarget: {platform: sandbox}\nguards: {allow_quorum_loss: true}\n"
        "faults:\n  - {at: 1s, kind: data-loss, select: {count: 3}}\n"
    )
    done, out = _run(tmp_path, bad)
    assert done.returncode == 2
    assert "bad.yaml:5:" in done.stderr and "data-loss needs a step with `marks: restore`" in (
        done.stderr
    )
    assert not out.exists()


@pytest.mark.slow
def test_a_failing_restore_ends_the_run_with_an_error_naming_the_step(tmp_path: Path) -> None:
    drill = _fast_drill(
        tmp_path,
        **{'run: rsdrill sandbox restore --dir "$RSDRILL_SANDBOX" --from "$RSDRILL_OUT/backup"':
           "run: echo restore tool says no >&2; exit 7",
           # Nothing comes back to read the ledger from: do not wait the default minute.
           "durability: {write_concern: majority}":
           "durability: {write_concern: majority, readback_timeout: 2s}"},
    )  # fmt: skip
    done, out = _run(tmp_path, drill)
    assert done.returncode == 4, done.stdout + done.stderr
    result = json.loads((out / "result.json").read_text())
    assert result["error"].startswith("step restore exited with status 7: restore tool says no")
    assert (out / "steps" / "restore.log").read_text().strip() == "restore tool says no"
    assert not Sandbox(out / "sandbox").running()
