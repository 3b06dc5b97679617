"""ci/rsdrill-ci.sh, the script the GitHub Action and the GitLab template run, run here as CI
would: a sandbox experiment of a few seconds (or a pytest SLO suite of it), with the GitHub
files ($GITHUB_STEP_SUMMARY, $GITHUB_OUTPUT) in the test's directory. rsdrill's exit status is
the script's, the summary lands on the "job page", and the reports are where the upload steps
look for them. (RSDRILL_INSTALL=none: the rsdrill under test is the one installed here; the
install itself is the Dockerfile test's.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "ci" / "rsdrill-ci.sh"

# The only member frozen for a second: writes stop for about that long, then resume.
EXPERIMENT = """\
name: ci-{name}
target: {{platform: sandbox, topology: rs1}}
guards: {{allow_quorum_loss: true}}
probes:
  availability: {{interval: 20ms, timeout: 250ms}}
faults:
  - {{at: 1s, kind: host-freeze, select: primary, duration: 1s}}
observe: {{steady_state: 1s, after_revert: 1s}}
slo:
  write_unavailable_s: "{condition}"
"""
PASSING, FAILING = "<= 60", "<= 0.01"


def _experiment(tmp_path: Path, name: str, condition: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(EXPERIMENT.format(name=name, condition=condition))
    return path


def ci(tmp_path: Path, **inputs: str) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
    """Run the script with `inputs` (RSDRILL_* variables) as a GitHub job step would; the step's
    outputs as a dict."""
    summary, outputs = tmp_path / "step-summary.md", tmp_path / "github-output"
    summary.write_text("earlier step\n")
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "RSDRILL_HOME": str(tmp_path / "home"),
        "RSDRILL_INSTALL": "none",
        "GITHUB_STEP_SUMMARY": str(summary),
        "GITHUB_OUTPUT": str(outputs),
        **inputs,
    }
    done = subprocess.run([str(SCRIPT)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=240)  # fmt: skip
    pairs = outputs.read_text().splitlines() if outputs.exists() else []
    return done, dict(pair.split("=", 1) for pair in pairs)


@pytest.mark.parametrize(
    ("condition", "status", "verdict"), [(PASSING, 0, "PASS"), (FAILING, 1, "FAIL")]
)
def test_an_experiments_exit_status_summary_and_reports(
    tmp_path: Path, condition: str, status: int, verdict: str
) -> None:
    experiment = _experiment(tmp_path, verdict.lower(), condition)
    done, outputs = ci(tmp_path, RSDRILL_EXPERIMENT=str(experiment), RSDRILL_OUT="results")
    assert done.returncode == status, done.stdout[-2000:] + done.stderr[-2000:]
    assert outputs["exit-code"] == str(status)

    summary = (tmp_path / "step-summary.md").read_text()
    assert summary.startswith("earlier step\n"), "appended to, not replaced"
    assert f"## rsdrill: ci-{verdict.lower()}: {verdict}" in summary
    assert "write_unavailable_s" in summary
    assert f"ci-{verdict.lower()}: {verdict}" in done.stdout  # the job's log shows it too

    out = tmp_path / "results"
    for name in ("report", "junit", "summary"):
        assert (tmp_path / outputs[name]).is_file(), name
    assert (tmp_path / outputs["report"]) == out / "report.html"
    assert (tmp_path / outputs["junit"]) == out / "junit.xml"
    assert "<testsuite" in (out / "junit.xml").read_text()


def test_a_pytest_slo_suite_fails_the_job_with_each_runs_summary(tmp_path: Path) -> None:
    _experiment(tmp_path, "fail", FAILING)
    (tmp_path / "test_chaos.py").write_text(
        "import pytest\n\n\n"
        '@pytest.mark.rsdrill("fail.yaml")\n'
        "def test_freeze_is_survived(rsdrill):\n"
        "    pass\n"
    )
    done, outputs = ci(tmp_path, RSDRILL_PYTEST="test_chaos.py -p no:cacheprovider -p no:randomly")
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    assert outputs["exit-code"] == "1"
    junit = tmp_path / outputs["junit"]
    assert junit == tmp_path / "rsdrill-results" / "junit.xml"
    assert 'name="test_freeze_is_survived"' in junit.read_text()
    assert "<failure" in junit.read_text()
    reports = list((tmp_path / outputs["report"]).glob("*/report.html"))
    assert len(reports) == 1, reports
    summary = (tmp_path / "step-summary.md").read_text()
    assert "## rsdrill: ci-fail: FAIL" in summary


def test_a_refused_run_shows_nothing_of_yesterday_s(tmp_path: Path) -> None:
    out = tmp_path / "results"
    (out / "runs" / "test_old").mkdir(parents=True)
    for stale in (out / "summary.md", out / "runs" / "test_old" / "summary.md"):
        stale.write_text("## rsdrill: ci-pass: PASS (yesterday's)\n")
    (out / "junit.xml").write_text("<testsuites/>\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: ci-bad\ntarget: {platform: sandbox}\nfaults: []\n")
    done, outputs = ci(tmp_path, RSDRILL_EXPERIMENT=str(bad), RSDRILL_OUT="results")
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert outputs["exit-code"] == "2"
    # Before: yesterday's PASS summary on today's job page, its junit.xml in the test view.
    assert "yesterday" not in (tmp_path / "step-summary.md").read_text()
    assert "yesterday" not in done.stdout
    assert not (out / "junit.xml").exists()
