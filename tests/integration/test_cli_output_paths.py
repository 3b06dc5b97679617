"""Output paths the user names (`--out`, `--chart`, `--metrics-file`, `--history`) that cannot
be written: refused in one line naming the option and what is in the way, exit status 2, before
anything starts; never a traceback, never exit 1 (an SLO failed)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from rsdrill.cli.app import app

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENT = str(ROOT / "experiments" / "rs3-stepdown.yaml")


@pytest.fixture
def a_file(tmp_path: Path) -> Path:
    path = tmp_path / "afile"
    path.write_text("not a directory\n")
    return path


SOAK = str(ROOT / "experiments" / "soak-rs3.yaml")


@pytest.mark.parametrize(
    "args",
    [
        ["run", EXPERIMENT, "--out", "{file}/sub"],
        ["run", EXPERIMENT, "--out", "{file}"],
        ["soak", SOAK, "--out", "{file}/sub"],
        ["schema", "--out", "{file}/x.json"],
        ["report", "fleet", "--out", "{file}/sub", "--db", "{tmp}/history.sqlite"],
        # Files a run writes once it is over: found then, the run had already broken the set.
        ["run", EXPERIMENT, "--out", "{tmp}/out", "--no-history",
         "--metrics-file", "{file}/m.prom"],
        ["run", EXPERIMENT, "--out", "{tmp}/out", "--history", "{file}/h.sqlite"],
        ["run", EXPERIMENT, "--out", "{tmp}/out", "--history", "sqlite:///{file}/h.sqlite"],
        ["sandbox", "up", "--dir", "{file}/sb", "--topology", "rs1", "--engine", "emulator"],
        ["sandbox", "demo", "--dir", "{file}/sb", "--topology", "rs1", "--engine", "emulator"],
        ["sandbox", "backup", "--to", "{file}/backup", "--dir", "{tmp}/no-sandbox"],
    ],
    ids=["run-under-a-file", "run-onto-a-file", "soak", "schema", "report-fleet",
         "run-metrics-file", "run-history", "run-history-url", "sandbox-up", "sandbox-demo",
         "sandbox-backup"],
)  # fmt: skip
def test_an_output_path_in_the_way_of_a_file_is_refused_before_anything_runs(
    args: list[str], a_file: Path, tmp_path: Path
) -> None:
    given = [a.format(file=a_file, tmp=tmp_path) for a in args]
    result = CliRunner().invoke(app, given)
    assert result.exit_code == 2, (result.output, result.exception)
    assert f"{a_file} is a file, not a directory" in result.output, result.output
    assert "Traceback" not in result.output
    assert a_file.read_text() == "not a directory\n"
    assert not list(tmp_path.rglob("sandbox"))  # nothing was started
    assert not (tmp_path / "out").exists()


def test_an_output_file_that_is_a_directory_is_refused_before_anything_runs(
    tmp_path: Path,
) -> None:
    given = ["run", EXPERIMENT, "--out", str(tmp_path / "out"), "--history", str(tmp_path)]
    result = CliRunner().invoke(app, given)
    assert result.exit_code == 2, (result.output, result.exception)
    assert result.stderr == f"--history {tmp_path}: {tmp_path} is a directory\n"
    assert not (tmp_path / "out").exists()


def test_an_output_file_message_names_the_option_and_the_path(a_file: Path) -> None:
    result = CliRunner().invoke(app, ["schema", "--out", f"{a_file}/x.json"])
    assert result.stderr == f"--out {a_file}/x.json: {a_file} is a file, not a directory\n"
