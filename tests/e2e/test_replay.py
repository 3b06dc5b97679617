"""`rsdrill replay` end to end on the sandbox: timelines injected on time, a previous run's
faults reproduced, and an incident derived from mongod's log re-enacted."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from rsdrill.experiment.loader import load_document
from rsdrill.experiment.timeline import Timeline
from tests.harness.cli import rsdrill_run

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
# The timeline's own times are exact (`due_at_s`, `revert_due_at_s`); how late this process
# acted on them is the machine's: on a busy one (three replays at once beside a CPU and an
# fsync hog), 0-0.12 s, all of it the runner's thread waiting for a CPU or the GIL (its sleep
# ending late, then the journal's write and the injector's first call: each under 0.5 ms when
# idle). A fault later than the bound waited on something, e.g. a frozen member asked for its
# state live (0.3 s).
LATE_S = 0.2


def _rsdrill(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return rsdrill_run(
        [*args, "--no-live", "--no-history"] if args[0] == "replay" else [*args],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "RSDRILL_HOME": str(tmp_path / "home")},
    )  # fmt: skip


def _faults(out: Path) -> list[dict[str, Any]]:
    return list(json.loads((out / "result.json").read_text())["faults"])


def _went_in_at(fault: dict[str, Any], due_s: float) -> None:
    """The fault was due at `due_s` (to the millisecond a timeline gives) and went in then."""
    assert abs(fault["due_at_s"] - due_s) <= 0.001, (fault, due_s)
    assert 0 <= fault["injected_at_s"] - fault["due_at_s"] < LATE_S, fault


def _held_for(fault: dict[str, Any], held_s: float) -> None:
    """Due to be reverted `held_s` after its injection returned, and reverted then."""
    assert abs(fault["revert_due_at_s"] - fault["applied_at_s"] - held_s) <= 0.001, (fault, held_s)
    assert 0 <= fault["reverted_at_s"] - fault["revert_due_at_s"] < LATE_S, fault


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


def test_each_fault_is_injected_at_its_offset(first_run: Path) -> None:
    faults = _faults(first_run)
    assert [f["kind"] for f in faults] == ["host-freeze", "stepdown", "host-kill"]
    assert [f["detail"]["role"] for f in faults] == ["SECONDARY", "PRIMARY", "PRIMARY"]
    for fault, planned in zip(faults, (2.0, 3.0, 8.0), strict=True):
        _went_in_at(fault, planned)  # no wait for a role slid the timeline
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
        _went_in_at(new, old["injected_at_s"])
        if old["reverted_at_s"] is None:
            assert new["reverted_at_s"] is None
        else:
            # Held as long as the original was, from when the injection returned: a kill's own
            # wait for the process to go (50 and 100 ms in CI's two runs on a busy machine) is
            # not part of the duration.
            _held_for(new, old["reverted_at_s"] - old["applied_at_s"])


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
    _went_in_at(faults[0], 2.0)
    _held_for(faults[0], 4.0)
    _went_in_at(faults[1], 12.0)
