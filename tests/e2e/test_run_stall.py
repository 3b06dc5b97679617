"""`rsdrill run` whose own process stalls: the result says the gap may be this machine's.

The runner is stopped with SIGSTOP for about 1.5 s mid-run (as a starved or swapped-out CI
machine would stop it); the sandbox's members are separate processes and keep running, so the
cluster stays available and the only gap is rsdrill's own.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest

from rsdrill.sandbox.cluster import Sandbox
from tests.e2e.test_run_cli import _member_pids, _start, _wait_for_text

# A quiet fault: one secondary frozen, a majority left, no election.
EXPERIMENT = (
    "name: stall-test\n"
    "target: {platform: sandbox, topology: rs3, election_timeout: 1s}\n"
    "faults:\n  - {at: 2s, kind: host-freeze, select: secondary, duration: 6s}\n"
    "observe: {after_revert: 2s}\n"
    'slo: {probe_stall_s: "< 0.5"}\n'
)
STOPPED_S = 1.5


def _cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")


def _run(tmp_path: Path, stop_runner: bool) -> tuple[str, dict, int]:
    experiment = tmp_path / "exp.yaml"
    experiment.write_text(EXPERIMENT)
    proc = _start(tmp_path, experiment)
    try:
        seen = _wait_for_text(proc, "injected host-freeze", 90)
        if stop_runner:
            # The pid stopped is the runner's (`python -m rsdrill.cli run`), not a member's.
            members = _member_pids(tmp_path / "out" / "sandbox")
            assert len(members) == 3 and proc.pid not in members
            assert _cmdline(proc.pid)[1:4] == ["-m", "rsdrill.cli", "run"]
            assert all("rsdrill.cli" not in _cmdline(pid) for pid in members)
            time.sleep(0.5)
            os.kill(proc.pid, signal.SIGSTOP)
            try:
                time.sleep(STOPPED_S)
            finally:
                os.kill(proc.pid, signal.SIGCONT)
        out, _ = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
            proc.wait(timeout=30)
            Sandbox(tmp_path / "out" / "sandbox").down()
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    return seen + out, result, proc.returncode


def test_a_stopped_runner_is_said_to_have_stalled_over_the_write_gap(tmp_path: Path) -> None:
    out, result, code = _run(tmp_path, stop_runner=True)
    metrics = result["metrics"]
    stall_s = metrics["probe_stall_s"]
    assert 1.2 <= stall_s <= 3.0, (stall_s, out)
    # The SLO that marks the measurement valid failed, and says by how much.
    assert code == 1 and result["verdict"] == "fail", out
    assert result["slo"] == [{"metric": "probe_stall_s", "op": "<", "threshold": 0.5,
                              "observed": stall_s, "pass": False}]  # fmt: skip
    longest = metrics["probe_stalls"][0]
    assert longest["seconds"] == stall_s
    # The write gap is the stop: it overlaps the stall and is flagged.
    gaps = {gap["metric"]: gap for gap in metrics["probe_stalled_gaps"]}
    write = gaps["write_unavailable_s"]
    assert write["stall_at_s"] == longest["at_s"]
    assert write["end_s"] - write["start_s"] == pytest.approx(metrics["write_unavailable_s"])
    assert write["stalled_s"] >= 1.2
    line = re.search(
        r"^probes: this process stalled (\d+\.\d) s at t=(\d+\.\d) s; the write gap "
        r"(\d+\.\d)-(\d+\.\d) s\b.*overlaps? it: (it|they) may be this machine's, not the "
        r"cluster's$",
        out,
        re.MULTILINE,
    )
    assert line is not None, out
    assert float(line[1]) == pytest.approx(stall_s, abs=0.05)
    assert float(line[2]) == pytest.approx(longest["at_s"], abs=0.05)
    assert float(line[3]) == pytest.approx(write["start_s"], abs=0.05)
    assert float(line[4]) == pytest.approx(write["end_s"], abs=0.05)
    # Said after the verdict, and in both reports.
    assert out.index("stall-test: FAIL") < out.index(line[0]), out
    assert line[0] in (tmp_path / "out" / "summary.md").read_text().replace("\\", "")
    assert "this process stalled" in (tmp_path / "out" / "report.html").read_text()


def test_a_quiet_run_has_no_stall_worth_saying(tmp_path: Path) -> None:
    out, result, code = _run(tmp_path, stop_runner=False)
    stall_s = result["metrics"]["probe_stall_s"]
    assert stall_s is not None and stall_s < 0.5, out
    assert code == 0 and result["slo"][0]["pass"] is True, out
    assert "this process stalled" not in out
    # Stalls send nothing to the cluster: not counted as the probes' load.
    assert "stall" not in result["metrics"]["probe_ops_per_s_by_probe"]
