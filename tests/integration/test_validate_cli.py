"""`rsdrill validate`, `plan` and `schema` run as a user runs them, in their own process (the
invalid fixtures, one at a time, through typer's runner; all of them at once in a process).

Each file in tests/fixtures/invalid/ starts with `# expect-line: N` (the line its error must
name) and `# expect-text: ...` (a part of the message).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rsdrill.cli.app import app
from rsdrill.faults import KIND_NAMES
from tests.harness.cli import rsdrill_run

INVALID_DIR = Path(__file__).parent.parent / "fixtures" / "invalid"
INVALID = sorted(INVALID_DIR.glob("*.yaml"))
# missing-env-var.yaml names this variable; it must not leak in from the caller's environment.
UNSET_VARIABLE = "RSDRILL_TEST_UNSET_PASSWORD"

VALID = """\
name: valid-minimal
target:
  platform: sandbox
  topology: rs3
faults:
  - at: 5s
    kind: host-kill
    duration: 20s
slo:
  write_unavailable_s: "<= 15"
"""


def rsdrill(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """Run the real command line in its own process."""
    env = {k: v for k, v in os.environ.items() if k != UNSET_VARIABLE}
    return rsdrill_run(
        [*map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def expectation(path: Path, name: str) -> str:
    """The value of `# {name}: ...` in the file's first lines (read as bytes: some are binary)."""
    head = path.read_bytes().split(b"\n")[:2]
    for line in head:
        match = re.match(rf"# {name}: (.*)$", line.decode("utf-8", "replace"))
        if match:
            return match.group(1)
    raise AssertionError(f"{path.name} has no `# {name}:` line")


@dataclass(frozen=True)
class Validated:
    returncode: int
    stdout: str
    stderr: str


def validate_in_process(*args: str | Path) -> Validated:
    """`rsdrill validate ARGS` through typer's runner: the command's own code, without a
    process start (0.6 s of imports each, 74 of them) per fixture."""
    result = CliRunner().invoke(app, ["validate", *map(str, args)], env={UNSET_VARIABLE: None})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception  # a traceback: what the real process would print
    return Validated(result.exit_code, result.stdout, result.stderr)


@pytest.fixture(scope="module")
def validated() -> dict[Path, Validated]:
    """`rsdrill validate --strict FILE` (what `rsdrill run` checks) for every invalid fixture;
    the real command line, in its own process, must say the same of them all at once."""
    each = {path: validate_in_process("--strict", path) for path in INVALID}
    real = rsdrill("validate", "--strict", *INVALID)
    assert real.returncode == 2 and real.stdout == "", real.stdout + real.stderr
    assert real.stderr == "".join(v.stderr for v in each.values())
    return each


def test_there_are_enough_invalid_files() -> None:
    assert len(INVALID) >= 24


@pytest.mark.parametrize("path", INVALID, ids=[p.stem for p in INVALID])
def test_invalid_file_is_one_located_line_and_exit_2(
    path: Path, validated: dict[Path, Validated]
) -> None:
    result = validated[path]
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"{path}:{expectation(path, 'expect-line')}:"), lines[0]
    assert expectation(path, "expect-text") in lines[0]


# Fixtures whose one problem is an unset ${VAR}: without --strict, a note and exit 0.
NEEDS_ENVIRONMENT = {"missing-env-var"}


@pytest.mark.parametrize("path", INVALID, ids=[p.stem for p in INVALID])
def test_without_strict_only_an_unset_variable_is_a_note(
    path: Path, validated: dict[Path, Validated]
) -> None:
    result = validate_in_process(path)
    if path.stem in NEEDS_ENVIRONMENT:
        assert (result.returncode, result.stdout) == (0, f"{path}: ok\n"), result.stderr
        (note,) = result.stderr.splitlines()
        assert note.startswith(f"note: {path}:{expectation(path, 'expect-line')}:")
        assert f"{UNSET_VARIABLE} not set: checked without its value" in note
    else:
        assert (result.returncode, result.stderr) == (2, validated[path].stderr)


def test_the_shipped_experiments_validate_in_an_empty_environment() -> None:
    files = sorted((Path(__file__).parents[2] / "experiments").rglob("*.yaml"))
    result = rsdrill_run(
        ["validate", *map(str, files)],
        capture_output=True, text=True, timeout=120,
        env={"PATH": os.environ["PATH"], "PYTHONPATH": os.environ.get("PYTHONPATH", "")},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"{f}: ok" for f in files]
    assert all(line.startswith("note: ") for line in result.stderr.splitlines())
    # Some do use variables: without their values, --strict refuses them as `run` would.
    assert result.stderr
    strict = rsdrill_run(
        ["validate", "--strict", *map(str, files)],
        capture_output=True, text=True, timeout=120,
        env={"PATH": os.environ["PATH"], "PYTHONPATH": os.environ.get("PYTHONPATH", "")},
    )  # fmt: skip
    assert strict.returncode == 2 and "is not set" in strict.stderr


def test_plan_says_it_needs_the_value_validate_went_without() -> None:
    """`validate` accepts a file whose `${VAR}` is unset (a note); `plan` refuses it, and says
    why the two differ (it said only: is not set)."""
    path = Path(__file__).parents[2] / "experiments" / "ec2-rs3-stop-primary.yaml"
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    planned = rsdrill_run(["plan", str(path)],
                          capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
    assert planned.returncode == 2, planned.stdout
    assert "RSDRILL_EC2_URI is not set: plan, check and run need its value" in planned.stderr


def test_an_unset_variable_does_not_hide_another_problem(tmp_path: Path) -> None:
    path = tmp_path / "two.yaml"
    path.write_text(
        "name: two\ntarget:\n  platform: local\n  uri: ${RSDRILL_TEST_UNSET_URI}\n"
        "  members: [{host: 'h:1', start: 'x'}]\nfaults:\n  - {at: 1s, kind: host-kil}\n"
    )
    result = rsdrill("validate", path)
    assert result.returncode == 2
    assert f"{path}:7:20: faults[0].kind: unknown value 'host-kil'" in result.stderr


def test_the_schema_accepts_the_shipped_experiments() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    yaml = pytest.importorskip("yaml")
    validator = jsonschema.Draft202012Validator(json.loads(rsdrill("schema").stdout))
    files = sorted((Path(__file__).parents[2] / "experiments").rglob("*.yaml"))
    with_variables = 0
    for path in files:
        document = yaml.safe_load(path.read_text())
        assert [e.message for e in validator.iter_errors(document)] == [], path
        with_variables += "${" in path.read_text()
    assert with_variables >= 4
    # A variable stands for a number, not any text.
    assert list(validator.iter_errors({**document, "guards": {"max_lag_before_start": True}}))


def test_valid_file_is_ok(tmp_path: Path) -> None:
    path = tmp_path / "valid.yaml"
    path.write_text(VALID)
    result = rsdrill("validate", path)
    assert (result.returncode, result.stdout, result.stderr) == (0, f"{path}: ok\n", "")


def test_every_file_is_checked_and_any_invalid_one_fails_the_run(tmp_path: Path) -> None:
    valid = tmp_path / "valid.yaml"
    valid.write_text(VALID)
    missing = tmp_path / "missing.yaml"
    invalid = INVALID_DIR / "misspelt-kind.yaml"
    result = rsdrill("validate", valid, missing, invalid)
    assert result.returncode == 2
    assert result.stdout == f"{valid}: ok\n"
    assert result.stderr.splitlines() == [
        f"{missing}:1:1: cannot read: No such file or directory",
        f"{invalid}:9:11: faults[0].kind: unknown value 'host-kil'; did you mean 'host-kill'? "
        f"(one of {', '.join(KIND_NAMES)})",
    ]


def test_validate_json_is_one_object_per_file_with_the_same_exit_status(
    tmp_path: Path,
) -> None:
    valid = tmp_path / "valid.yaml"
    valid.write_text(VALID)
    noted = INVALID_DIR / "missing-env-var.yaml"
    invalid = INVALID_DIR / "misspelt-kind.yaml"
    result = rsdrill("validate", "--json", valid, noted, invalid)
    assert result.returncode == 2 and result.stderr == ""
    ok, with_note, bad = json.loads(result.stdout)
    assert ok == {"file": str(valid), "ok": True, "notes": [], "error": None}
    assert with_note["ok"] is True and with_note["error"] is None
    (note,) = with_note["notes"]
    assert note["line"] == int(expectation(noted, "expect-line"))
    assert f"{UNSET_VARIABLE} not set" in note["problem"]
    assert bad["ok"] is False
    assert {k: bad["error"][k] for k in ("line", "column", "field")} == {
        "line": 9, "column": 11, "field": "faults[0].kind",
    }  # fmt: skip
    assert bad["error"]["message"].startswith(f"{invalid}:9:11: faults[0].kind: unknown value")
    assert rsdrill("validate", "--json", valid).returncode == 0


def test_plan_json_is_the_plan_as_data(tmp_path: Path) -> None:
    path = tmp_path / "valid.yaml"
    path.write_text(VALID)
    result = rsdrill("plan", "--json", path)
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert (plan["experiment"], plan["platform"], plan["topology"]) == ("valid-minimal", "sandbox",
                                                                          "rs3")  # fmt: skip
    steps = [(s["at_s"], s["action"], s["kind"]) for s in plan["timeline"]]
    assert steps[:3] == [(0.0, "observe", "steady-state"), (5.0, "inject", "host-kill"),
                         (25.0, "revert", "host-kill")]  # fmt: skip
    assert plan["timeline"][1]["description"] == "the primary at that moment (SIGKILL)"
    assert not any(s["one_way"] for s in plan["timeline"])
    assert plan["slo"] == {"write_unavailable_s": "<= 15"}
    assert plan["probes"]["load"] == "off" and "every 20ms" in plan["probes"]["availability"]
    refused = rsdrill("plan", "--json", INVALID_DIR / "missing-target.yaml")
    assert refused.returncode == 2 and json.loads(refused.stdout)["ok"] is False


def test_plan_json_marks_a_one_way_fault() -> None:
    path = Path(__file__).parents[2] / "experiments" / "rs3-disaster-recovery-drill.yaml"
    result = rsdrill("plan", "--json", path)
    assert result.returncode == 0, result.stderr
    marked = [
        (s["action"], s["kind"]) for s in json.loads(result.stdout)["timeline"] if s["one_way"]
    ]
    assert marked == [("inject", "data-loss")]


def test_plan_of_a_valid_file(tmp_path: Path) -> None:
    path = tmp_path / "valid.yaml"
    path.write_text(VALID)
    result = rsdrill("plan", path)
    assert result.returncode == 0, result.stderr
    assert "inject   host-kill  the primary at that moment (SIGKILL)" in result.stdout
    assert "write_unavailable_s <= 15" in result.stdout


def test_plan_of_an_invalid_file_exits_2() -> None:
    path = INVALID_DIR / "missing-target.yaml"
    result = rsdrill("plan", path)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == f"{path}:3:1: target: required field is missing\n"


def test_schema_is_json_naming_faults(tmp_path: Path) -> None:
    result = rsdrill("schema")
    assert result.returncode == 0, result.stderr
    schema = json.loads(result.stdout)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["title"] == "rsdrill experiment"
    assert "faults" in schema["properties"] and "faults" in schema["required"]
    assert "latency_ms.p99" in schema["properties"]["slo"]["properties"]
    out = tmp_path / "experiment.schema.json"
    assert rsdrill("schema", "--out", out).returncode == 0
    assert json.loads(out.read_text()) == schema


def test_schema_accepts_a_valid_file_and_rejects_a_misspelt_kind() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    yaml = pytest.importorskip("yaml")
    schema = json.loads(rsdrill("schema").stdout)
    validator = jsonschema.Draft202012Validator(schema)
    document = yaml.safe_load(VALID)
    document["x-anchors"] = {"any": "thing"}
    assert list(validator.iter_errors(document)) == []
    document["faults"][0]["kind"] = "host-kil"
    assert list(validator.iter_errors(document)) != []
    # Each kind is offered its own fields only: restart is host-kill's.
    document["faults"][0].update(kind="host-kill", restart={"volume": "wipe"})
    assert list(validator.iter_errors(document)) == []
    document["faults"][0]["kind"] = "stepdown"
    assert list(validator.iter_errors(document)) != []


def test_command_module_imports_neither_pydantic_nor_yaml() -> None:
    code = (
        "import sys, rsdrill.cli.experiment; "
        "print(sorted(m for m in ('pydantic', 'yaml') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "[]", result.stderr


def test_faults_lists_every_kind_from_its_spec() -> None:
    from rsdrill.experiment.faultdocs import fault_table, support_table
    from rsdrill.faults import KINDS

    result = rsdrill("faults")
    assert result.returncode == 0, result.stderr
    assert result.stdout == fault_table() + "\n" + support_table()
    assert all(f"| `{kind}` |" in result.stdout for kind in KINDS)
