"""What each platform really does for a fault, said from its ways (rsdrill/experiment/catalog.py
reads them from the registered platforms):
`rsdrill faults` and docs/faults.md show it, loading refuses an approximated or one-way fault
the file did not opt in to (FILE:LINE:COL, the table's line), and `rsdrill plan` and
`rsdrill check` mark one-way faults (red in a terminal)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rsdrill.cli.app import app
from rsdrill.experiment.catalog import way_of, ways_of
from rsdrill.experiment.faultdocs import faults_doc, faults_json, platform_table
from rsdrill.experiment.loader import ExperimentError, load_experiment_text
from rsdrill.faults import KINDS
from tests.harness.cli import rsdrill_run

ROOT = Path(__file__).resolve().parents[2]
DRILL = ROOT / "experiments" / "rs3-disaster-recovery-drill.yaml"


def rsdrill(*args: str) -> subprocess.CompletedProcess[str]:
    return rsdrill_run([*args], capture_output=True,
                       text=True, timeout=60, cwd=ROOT)  # fmt: skip


def test_docs_faults_md_is_the_generated_one() -> None:
    written = (ROOT / "docs" / "faults.md").read_text()
    assert written == faults_doc(), "regenerate it: python -m rsdrill.experiment.faultdocs"


def test_faults_for_one_platform_as_a_table_and_as_json() -> None:
    table = rsdrill("faults", "--platform", "ec2")
    assert table.returncode == 0, table.stderr
    assert table.stdout == platform_table("ec2")
    assert "| `iops-throttle` | api |" in table.stdout
    assert "one-way (`one_way: true`)" in table.stdout
    listed = rsdrill("faults", "--platform", "kubernetes", "--json")
    assert json.loads(listed.stdout) == faults_json("kubernetes")
    freeze = next(k for k in json.loads(listed.stdout)["kinds"] if k["kind"] == "host-freeze")
    assert [w["support"] for w in freeze["platforms"]["kubernetes"]] == ["exact", "approximate"]
    everything = json.loads(rsdrill("faults", "--json").stdout)
    assert [k["kind"] for k in everything["kinds"]] == list(KINDS)
    assert set(everything["kinds"][0]["platforms"]) == {"sandbox", "kubernetes", "ec2", "vsphere"}


def test_an_unknown_platform_is_one_clear_line() -> None:
    bad = rsdrill("faults", "--platform", "ec3")
    assert bad.returncode == 2
    assert bad.stderr.strip().startswith("--platform: unknown platform 'ec3'")
    assert "Traceback" not in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


K8S = """\
name: k8s-freeze
target:
  platform: kubernetes
  uri: mongodb://db1:27017/?replicaSet=rs0
  kubernetes: {{}}
faults:
  - at: 5s
    kind: host-freeze
    engine: chaos-mesh
    duration: 10s{extra}
"""


def test_an_approximation_is_refused_at_load_unless_the_fault_accepts_it() -> None:
    with pytest.raises(ExperimentError) as refused:
        load_experiment_text(K8S.format(extra=""), "freeze.yaml")
    assert str(refused.value) == (
        "freeze.yaml:8:11: faults[0].kind: an approximation (host-freeze on kubernetes (engine "
        "chaos-mesh): Chaos Mesh pod-failure: the container restarts instead of freezing "
        "*approx.*); set `approximate: true` on the fault to run it"
    )
    accepted = load_experiment_text(K8S.format(extra="\n    approximate: true"))
    fault = accepted.faults[0]
    assert way_of("kubernetes", fault) == ways_of("host-freeze", "kubernetes")[1]
    # the default way (engine native: SIGSTOP through pods/exec) is exact: no opt-in
    native = load_experiment_text(K8S.format(extra="").replace("    engine: chaos-mesh\n", ""))
    assert way_of("kubernetes", native.faults[0]).support == "exact"


def test_a_one_way_fault_is_refused_unless_the_fault_accepts_it(tmp_path: Path) -> None:
    text = DRILL.read_text()
    assert "one_way: true" in text
    path = tmp_path / "drill.yaml"
    path.write_text(text.replace(", one_way: true}", "}"))
    refused = rsdrill("validate", str(path))
    assert refused.returncode == 2
    # The fault's own line (the file's head may grow: a schema line, a description).
    line = next(n for n, text in enumerate(text.splitlines(), 1) if "kind: data-loss" in text)
    assert f"{path}:{line}:" in refused.stderr
    assert "one-way: it cannot be undone (data-loss on sandbox" in refused.stderr
    assert "set `one_way: true`" in refused.stderr


def test_plan_marks_a_one_way_fault_in_red_in_a_terminal() -> None:
    result = CliRunner().invoke(app, ["plan", str(DRILL)], color=True)
    assert result.exit_code == 0, result.output
    (line,) = [line for line in result.output.splitlines() if "ONE-WAY" in line]
    assert line.startswith("\x1b[31m") and "data directory wiped, cannot be undone" in line
    plain = rsdrill("plan", str(DRILL))  # not a terminal: no colour
    assert "ONE-WAY" in plain.stdout and "\x1b[" not in plain.stdout


def test_check_warns_of_a_one_way_fault() -> None:
    result = CliRunner().invoke(app, ["check", str(DRILL), "--json"])
    checks = json.loads(result.output)["checks"]
    assert {"name": "faults[0] one-way", "ok": None,
            "detail": "data-loss on sandbox: SIGKILL and the data directory wiped *one-way*"} in (
        checks)  # fmt: skip
    coloured = CliRunner().invoke(app, ["check", str(DRILL)], color=True)
    (line,) = [line for line in coloured.output.splitlines() if "one-way" in line]
    assert line.startswith("\x1b[31m")
