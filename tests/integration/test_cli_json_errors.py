"""Commands given --json refuse in JSON too: the object `validate --json` gives a file with a
problem (`file`, `ok: false`, `notes`, `error: {line, column, field, problem, message}`), on
stdout, nothing on stderr (as validate), with the command's own exit status. A CI job parsing
the output of a failed command found nothing on stdout.

Click's own usage errors (unknown option, missing argument, bad value) too, wherever --json
stands on the command line: they come before the command's parameters are bound."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rsdrill.cli.app import app
from tests.harness.cli import rsdrill_run

ROOT = Path(__file__).resolve().parents[2]
INVALID = ROOT / "tests" / "fixtures" / "invalid" / "misspelt-kind.yaml"
EXPERIMENT = ROOT / "experiments" / "rs3-stepdown.yaml"
ERROR_KEYS = {"line", "column", "field", "problem", "message"}


def refusal(args: list[str], status: int = 2) -> dict[str, Any]:
    """The JSON object a refused command printed (checked: nothing on stderr, `status`)."""
    result = CliRunner().invoke(app, args)
    assert result.exit_code == status, (result.stdout, result.stderr, result.exception)
    assert result.stderr == ""
    refused = json.loads(result.stdout)
    assert refused["ok"] is False and refused["notes"] == []
    assert set(refused["error"]) == ERROR_KEYS
    return refused


@pytest.mark.parametrize("command", ["plan", "check"])
def test_an_invalid_file_is_refused_as_validate_json_gives_it(command: str) -> None:
    validated = CliRunner().invoke(app, ["validate", "--json", str(INVALID)])
    (expected,) = json.loads(validated.stdout)
    assert refusal([command, "--json", str(INVALID)]) == expected
    assert expected["error"]["line"] == 9 and expected["file"] == str(INVALID)


@pytest.mark.parametrize(
    ("args", "status", "says"),
    [
        (["plan", "--json", "--seed", "3", str(EXPERIMENT)], 2, "--seed needs"),
        (["audit", "--json", "mongodb://u:s3cret@127.0.0.1:1/?replicaSet=rs0"], 2,
         "no member of the replica set answers"),
        (["faults", "--json", "--platform", "bogus"], 2, "unknown platform 'bogus'"),
        (["history", "--json", "--since", "garbage", "--db", "{tmp}/h.sqlite"], 2, "--since"),
        (["history", "--json", "--format", "openmetrics"], 2, "choose one"),
        (["sandbox", "status", "--json", "--dir", "{tmp}/none"], 2, "no sandbox in"),
        (["sandbox", "up", "--json", "--auth", "--x509", "--dir", "{tmp}/sb"], 2,
         "choose one login"),
    ],
    ids=["plan-seed", "audit-unreachable", "faults", "history-since", "history-format",
         "sandbox-status", "sandbox-up"],
)  # fmt: skip
def test_a_refusal_that_is_not_in_a_file_is_json_too(
    args: list[str], status: int, says: str, tmp_path: Path
) -> None:
    refused = refusal([a.format(tmp=tmp_path) for a in args], status)
    assert refused["file"] is None
    assert says in refused["error"]["message"]
    assert refused["error"]["problem"] == refused["error"]["message"]
    assert "s3cret" not in refused["error"]["message"]  # the URI is redacted, as in text
    assert not (tmp_path / "sb").exists()


def test_a_history_that_cannot_be_read_keeps_its_exit_status(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    db.write_text("not a database")
    refused = refusal(["history", "--json", "--db", str(db)], status=4)
    assert "cannot read the history" in refused["error"]["message"]


def test_without_json_the_refusal_is_one_line_on_stderr() -> None:
    result = CliRunner().invoke(app, ["plan", str(INVALID)])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith(f"{INVALID}:9:11: faults[0].kind: unknown value")
    assert len(result.stderr.splitlines()) == 1


SECRET_URI = "mongodb://u:s3cret@127.0.0.1:1/?replicaSet=rs0"
USAGE_ERRORS = [
    (["validate", "--json"], "Missing argument 'FILE'."),
    (["validate", "--bogus", str(EXPERIMENT), "--json"], "No such option: --bogus"),
    (["plan", "--seed", "abc", "--json", str(EXPERIMENT)], "Invalid value for '--seed'"),
    (["audit", "--catch-up", "abc", SECRET_URI, "--json"], "Invalid value for '--catch-up'"),
    (["audit", "--json", "extra", SECRET_URI], "Got unexpected extra argument(s) (mongodb://u:***@"),
    (["--bogus", "validate", str(EXPERIMENT), "--json"], "No such option: --bogus"),
    (["sandbox", "up", "--json", "--topology", "rs9"], "Invalid value for '--topology'"),
    (["nosuch", "--json"], "No such command 'nosuch'"),
]  # fmt: skip
USAGE_IDS = ["missing-argument", "json-after-bad-option", "bad-value", "bad-value-with-uri",
             "extra-argument-uri", "root-option", "subcommand", "unknown-command"]  # fmt: skip


@pytest.mark.parametrize(("args", "says"), USAGE_ERRORS, ids=USAGE_IDS)
def test_a_usage_error_under_json_is_the_json_refusal(args: list[str], says: str) -> None:
    """The console script's own process: --json is read from its real command line."""
    result = rsdrill_run(args, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and result.stderr == "", (result.stdout, result.stderr)
    refused = json.loads(result.stdout)
    assert refused == {
        "file": None, "ok": False, "notes": [],
        "error": {"line": None, "column": None, "field": None,
                  "problem": refused["error"]["message"], "message": refused["error"]["message"]},
    }  # fmt: skip
    assert says in refused["error"]["message"]
    assert "s3cret" not in result.stdout


@pytest.mark.parametrize(("args", "says"), USAGE_ERRORS, ids=USAGE_IDS)
def test_without_json_a_usage_error_stays_clicks_text(args: list[str], says: str) -> None:
    result = rsdrill_run([a for a in args if a != "--json"], capture_output=True, text=True,
                         timeout=60)  # fmt: skip
    assert result.returncode == 2 and result.stdout == "", result.stdout
    assert result.stderr.startswith("Usage: ")
    assert f"Error: {says}" in result.stderr
    assert "Traceback" not in result.stderr and "s3cret" not in result.stderr


def test_json_after_the_end_of_options_is_not_asked_for(tmp_path: Path) -> None:
    """`--` ends the options: a file named --json is a file (and --bogus one too)."""
    result = rsdrill_run(["validate", "--", "--json", "--bogus"], capture_output=True,
                         text=True, timeout=60, cwd=tmp_path)  # fmt: skip
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines()[0].startswith("--json:1:1: cannot read")
