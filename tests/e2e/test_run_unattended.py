"""What a nightly job sees when something goes wrong around the run: another job writing into
the same results directory, a report that cannot be written."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.harness.cli import Rsdrill, rsdrill_run

EXPERIMENT = """name: unattended
target: {platform: sandbox, topology: rs3, election_timeout: 1s}
probes:
  availability: {interval: 50ms, timeout: 250ms}
faults:
  - {at: 1s, kind: host-freeze, select: secondary, duration: DURATION}
observe: {after_revert: 1s}
slo:
  write_unavailable_s: "<= 15"
"""


def _experiment(tmp_path: Path, duration: str = "1s") -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(EXPERIMENT.replace("DURATION", duration))
    return path


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "RSDRILL_HOME": str(tmp_path / "home")}


def _wait_for_text(proc: subprocess.Popen[str], text: str, timeout: float) -> str:
    assert proc.stdout is not None
    seen = ""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        seen += line
        if text in line:
            return seen
        if not line and proc.poll() is not None:
            break
    pytest.fail(f"never saw {text!r}; output so far:\n{seen}")


def test_a_second_run_into_a_results_directory_in_use_is_refused(tmp_path: Path) -> None:
    experiment = _experiment(tmp_path, duration="30s")
    first = Rsdrill(["run", str(experiment), "--out", "out", "--no-live", "--no-history"],
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path,
                    env=_env(tmp_path))  # fmt: skip
    try:
        _wait_for_text(first, "injected host-freeze", 60)
        second = rsdrill_run(["run", str(experiment), "--out", "out", "--no-live",
                              "--no-history"], capture_output=True, text=True, cwd=tmp_path,
                             env=_env(tmp_path), timeout=60)  # fmt: skip
        # Before: exit 4 once its sandbox was refused ("stop it with rsdrill sandbox down", the
        # first run's), its reports written over the first's.
        assert second.returncode == 2, second.stdout + second.stderr
        assert second.stdout == ""
        assert second.stderr.strip() == (
            "--out out: another rsdrill run is writing its results there; give each run its "
            "own --out"
        )
        assert not (tmp_path / "out" / "result.json").exists()
    finally:
        first.terminate()  # SIGTERM: the first run reverts and reports, exit 3
        first.communicate(timeout=120)
    assert first.returncode == 3
    assert json.loads((tmp_path / "out" / "result.json").read_text())["verdict"] == "aborted"


def test_a_report_that_cannot_be_written_is_one_line_and_exit_4(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "junit.xml").mkdir(parents=True)  # in the way, as a full disk is: an OSError
    (out / "summary.md").write_text("yesterday's run: PASS\n")
    done = rsdrill_run(["run", str(_experiment(tmp_path)), "--out", str(out), "--no-live",
                        "--no-history"], capture_output=True, text=True, env=_env(tmp_path),
                       timeout=120)  # fmt: skip
    # Before: a traceback and exit 1, which CI reads as an SLO that failed.
    assert done.returncode == 4, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout.startswith("unattended: PASS\n")
    assert f"rsdrill: cannot write {out / 'junit.xml'}: Is a directory; the run's reports are " \
           "incomplete\n" in done.stderr  # fmt: skip
    assert json.loads((out / "result.json").read_text())["verdict"] == "pass"
    assert not (out / "summary.md").exists()  # not yesterday's, taken for today's
    assert not list(out.glob(".*partial"))
