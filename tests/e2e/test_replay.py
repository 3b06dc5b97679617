"""`rsdrill replay` end to end on the sandbox: timelines injected on time, a previous run's
faults reproduced, and an incident derived from mongod's log re-enacted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rsdrill.experiment.loader import load_document
from rsdrill.experiment.timeline import Timeline

FIXTURES = Path(__file__).parent.parent / "fixtures"
FAST_TARGET = "target: {platform: sandbox, topology: rs3, election_timeout: 1s}\n"

# Overlapping faults on purpose: while the secondary is frozen, asking every member for its
# state live would wait out the frozen one's timeout and put the stepdown ~0.3 s late.
THREE_FAULTS = f"""\
name: three-faults
{FAST_TARGET}lead_in: 2s
events:
  - {{at: t+0, kind: host-freeze, select: secondary, duration: 3s, note: secondary stalls}}
  - {{at: t+1s, kind: stepdown, select: primary, note: operator steps the primary down}}
  - {{at: t+6s, kind: host-kill, select: primary, duration: 3s, note: new primary's host lost}}
observe: {{after_revert: 10s}}
slo: {{lost_acknowledged_writes: "== 0"}}
"""
TOLERANCE_S = 0.05


def _rsdrill(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rsdrill.cli", *args, "--no-live", "--no-history"]
        if args[0] == "replay"
        else [sys.executable, "-m", "rsdrill.cli", *args],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "RSDRILL_HOME": str(tmp_path / "home")},
    )  # fmt: skip


def _faults(out: Path) -> list[dict[str, Any]]:
    return list(json.loads((out / "result.json").read_text())["faults"])


def _fast_target_file(tmp_path: Path) -> Path:
    path = tmp_path / "target.yaml"
    path.write_text(
        f"name: fast-target\n{FAST_TARGET}faults: [{{at: 1s, kind: stepdown, select: primary}}]\n"
    )
    return path


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The three-fault timeline replayed once; its results directory."""
    tmp_path = tmp_path_factory.mktemp("replay")
    timeline = tmp_path / "timeline.yaml"
    timeline.write_text(THREE_FAULTS)
    out = tmp_path / "out"
    proc = _rsdrill(tmp_path, "replay", str(timeline), "--out", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def test_each_fault_is_injected_within_50ms_of_its_offset(first_run: Path) -> None:
    faults = _faults(first_run)
    assert [f["kind"] for f in faults] == ["host-freeze", "stepdown", "host-kill"]
    assert [f["detail"]["role"] for f in faults] == ["SECONDARY", "PRIMARY", "PRIMARY"]
    for fault, planned in zip(faults, (2.0, 3.0, 8.0), strict=True):
        assert abs(fault["injected_at_s"] - planned) < TOLERANCE_S, (fault, planned)
    assert (first_run / "timeline.yaml").read_text().startswith("name: three-faults")


def test_replay_from_result_reproduces_the_fault_sequence(first_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "again"
    proc = _rsdrill(
        tmp_path, "replay", "--from", str(first_run / "result.json"),
        "--target-file", str(_fast_target_file(tmp_path)), "--out", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # Judged as the run it repeats was.
    assert "judged by the original run's SLOs: lost_acknowledged_writes == 0.0" in proc.stdout
    slo = json.loads((out / "result.json").read_text())["slo"]
    assert [(s["metric"], s["op"], s["threshold"]) for s in slo] == [
        ("lost_acknowledged_writes", "==", 0.0)
    ]
    before, after = _faults(first_run), _faults(out)
    assert [(f["kind"], f["detail"]["role"]) for f in after] == [
        (f["kind"], f["detail"]["role"]) for f in before
    ]
    for old, new in zip(before, after, strict=True):
        assert abs(new["injected_at_s"] - old["injected_at_s"]) < TOLERANCE_S, (old, new)
        if old["reverted_at_s"] is None:
            assert new["reverted_at_s"] is None
        else:
            # Held from when the injection returned: a kill's own wait for the process to go
            # (50 and 100 ms in CI's two runs on a busy machine) is not part of the duration.
            held_before = old["reverted_at_s"] - old["applied_at_s"]
            held_after = new["reverted_at_s"] - new["applied_at_s"]
            assert abs(held_after - held_before) < TOLERANCE_S, (old, new)


def test_an_incident_from_mongod_logs_replays_on_the_sandbox(tmp_path: Path) -> None:
    timeline = tmp_path / "incident.yaml"
    derived = _rsdrill(
        tmp_path, "timeline", "from-mongod-log", str(FIXTURES / "mongod-incident.log"),
        "--out", str(timeline),
    )  # fmt: skip
    assert derived.returncode == 0, derived.stderr
    assert load_document(Timeline, timeline).events  # it validates, with FILE:LINE:COL if not
    out = tmp_path / "out"
    proc = _rsdrill(
        tmp_path, "replay", str(timeline), "--target-file", str(_fast_target_file(tmp_path)),
        "--out", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    faults = _faults(out)
    assert [(f["kind"], f["detail"]["role"]) for f in faults] == [
        ("host-kill", "PRIMARY"),
        ("stepdown", "PRIMARY"),
    ]
    # The log's offsets (t+0, t+10s; the kill lasting 4 s, held from when it took effect: the
    # kill's own wait for the process to go took 58 ms in CI) after the 2 s lead-in.
    assert abs(faults[0]["injected_at_s"] - 2.0) < TOLERANCE_S
    assert abs(faults[0]["reverted_at_s"] - faults[0]["applied_at_s"] - 4.0) < TOLERANCE_S
    assert abs(faults[1]["injected_at_s"] - 12.0) < TOLERANCE_S
