"""host-kill with `restart: {model: ha}` end to end on the sandbox and local platforms: the host
comes back once the failure is detected, boots, then the member starts; the result records each
phase, the phases add up to the member's return, and the outage follows detect and boot.

Short detect and boot values keep the runs to seconds; the documented defaults (15 s, 60 s)
run in bench/seeds.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rsdrill.engine.options import RunOptions
from rsdrill.engine.runner import run_experiment
from rsdrill.experiment.schema import Experiment
from rsdrill.result import Result
from rsdrill.sandbox.groundtruth import all_events
from tests.e2e.local_set import local_target


def _run(tmp_path: Path, target: dict[str, Any], fault: dict[str, Any]) -> Result:
    experiment = Experiment.model_validate({
        "name": "ha-restart",
        "target": target,
        "probes": {"availability": {"interval": "20ms", "timeout": "250ms",
                                    "write_concern": 1, "journal": True}},
        "faults": [{"at": "2s", "kind": "host-kill", **fault}],
        "observe": {"after_revert": "20s"},
        "guards": {"allow_quorum_loss": True},
    })  # fmt: skip
    return run_experiment(experiment, RunOptions(out_dir=tmp_path, live=False,
                                                 journal_dir=tmp_path))  # fmt: skip


def _listening_after(directory: Path, member: str, kill_mono: float) -> float:
    """Seconds from the kill to the member's process listening again (its own event log)."""
    return min(e["t_mono"] for e in all_events(directory)
               if e["event"] == "listening" and e["member"] == member
               and e["t_mono"] > kill_mono) - kill_mono  # fmt: skip


def _phases(result: Result) -> dict[str, Any]:
    ha = result.faults[0].detail["ha"]
    parts = ha["detect_s"], ha["boot_s"], ha["member_start_s"]
    assert None not in parts and ha["back_s"] == pytest.approx(sum(parts))
    return dict(ha)


def test_rs1_ha_restart_phases_add_up_to_the_outage_and_follow_detect_and_boot(
    tmp_path: Path,
) -> None:
    outages = []
    for detect, boot in ((1.0, 1.0), (2.0, 3.0)):
        result = _run(tmp_path / f"{detect:g}-{boot:g}", {"platform": "sandbox", "topology": "rs1"},
                      {"restart": {"model": "ha", "detect": detect, "boot": boot}})  # fmt: skip
        assert result.verdict == "pass", result.error
        ha = _phases(result)
        assert ha["model"] == {"detect_s": detect, "boot_s": boot}
        # Detection: the schedule's revert, `detect` after the kill.
        assert detect - 0.05 <= ha["detect_s"] <= detect + 0.5, ha
        assert ha["boot_s"] == boot
        # The member's own start: the process up, its data open, its election as a one-member
        # set; measured, not modelled (an emulator member starts in well under 5 s).
        assert 0 < ha["member_start_s"] < 5, ha
        # The member really started after detection and boot (its own event log).
        fault = result.faults[0]
        assert result.clock is not None and fault.injected_at_s is not None
        listening = _listening_after(tmp_path / f"{detect:g}-{boot:g}" / "sandbox",
                                     fault.target,
                                     result.clock.t0_monotonic + fault.injected_at_s)  # fmt: skip
        assert detect + boot <= listening <= ha["back_s"] + 0.2, (listening, ha)
        # The service came back with the member: the writes' gap is its return, plus the
        # client finding it again (and minus the gap's start, the last write before the kill).
        gap = result.metrics.write_unavailable_s
        assert gap is not None and ha["back_s"] - 0.5 <= gap <= ha["back_s"] + 3, (gap, ha)
        assert result.metrics.failover_s is None
        outages.append(gap)
    # Three more seconds of detection and boot: three more seconds without writes.
    assert 1.5 <= outages[1] - outages[0] <= 4.5, outages


def test_a_local_member_boots_before_its_command_runs(
    tmp_path: Path, existing_set: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A member started outside rsdrill comes back with its own command, run only once the
    host has booted."""
    monkeypatch.setenv("RSDRILL_ALLOW", "rs0")
    restart = {"model": "ha", "detect": "1s", "boot": "1.5s"}
    result = _run(tmp_path, local_target(existing_set), {"select": "secondary", "restart": restart})
    assert result.verdict == "pass", result.error
    ha = _phases(result)
    assert ha["boot_s"] == 1.5 and 0 < ha["member_start_s"] < 5, ha
    fault = result.faults[0]
    assert result.clock is not None and fault.injected_at_s is not None
    listening = _listening_after(existing_set, fault.target,
                                 result.clock.t0_monotonic + fault.injected_at_s)  # fmt: skip
    assert 2.5 <= listening <= ha["back_s"] + 0.2, (listening, ha)
