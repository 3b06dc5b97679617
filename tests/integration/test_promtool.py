"""Prometheus's own linter on rsdrill's metrics: `promtool check metrics` accepts the textfile a
run writes and the history's OpenMetrics exposition (names, units, types, label names)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from prometheus_client.exposition import generate_latest
from report_sample import sample_result
from typer.testing import CliRunner

from rsdrill import store
from rsdrill.cli.app import app
from rsdrill.report import openmetrics

REPO = Path(__file__).resolve().parents[2]
INSTALL = REPO / ".ci" / "install-prometheus"


@pytest.fixture(scope="module")
def promtool() -> Path:
    """promtool from Debian's prometheus package, unpacked by the project's script if missing."""
    done = subprocess.run([str(INSTALL)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return Path(done.stdout.strip().splitlines()[-1])


def _check(promtool: Path, text: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(promtool), "check", "metrics"], input=text, capture_output=True,
                          text=True, timeout=60)  # fmt: skip


def test_the_textfile_of_a_run_passes_promtool(promtool: Path, tmp_path: Path) -> None:
    path = tmp_path / "rsdrill.prom"
    openmetrics.write_textfile(openmetrics.result_registry(sample_result()), path)
    text = path.read_text()
    assert "rsdrill_operation_latency_seconds" in text and "rsdrill_slo_passed" in text
    done = _check(promtool, text)
    assert done.returncode == 0 and not done.stdout + done.stderr, done.stdout + done.stderr


def test_the_history_families_pass_promtool(promtool: Path, tmp_path: Path) -> None:
    """`rsdrill history --format openmetrics` writes the OpenMetrics format, which this promtool
    does not read; the same registry in Prometheus's text format is what it judges."""
    db = tmp_path / "history.sqlite"
    store.record(sample_result(), tmp_path, db)
    out = CliRunner().invoke(app, ["history", "--db", str(db), "--format", "openmetrics"])
    assert out.exit_code == 0, out.output
    assert "rsdrill_runs_total" in out.output
    text = generate_latest(openmetrics.history_registry(store.history(db))).decode()
    assert "rsdrill_runs_total" in text
    done = _check(promtool, text)
    assert done.returncode == 0 and not done.stdout + done.stderr, done.stdout + done.stderr


def test_promtool_is_a_real_judge(promtool: Path) -> None:
    """What the latency family used to be (a gauge labelled `quantile`) is refused."""
    bad = '# HELP x_seconds x\n# TYPE x_seconds gauge\nx_seconds{quantile="0.5"} 1\n'
    done = _check(promtool, bad)
    assert done.returncode != 0 and "quantile" in done.stdout + done.stderr
