"""A result.json given back to rsdrill (`history push DIR`, `replay --from FILE`) that cannot be
one is refused in one line naming the file, exit status 2: a file of another encoding escaped
both as a traceback (exit 1), and `history push` said "7 validation errors for Result"."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from rsdrill.cli.app import app

CASES = [
    (b"\xff\xfe{}", "not UTF-8 text (byte 0xff): not an rsdrill result.json"),
    (b'{"a": 1}', "not an rsdrill result.json ("),
    (b"garbage", "not an rsdrill result.json ("),
]


def refused(args: list[str]) -> str:
    """The one line a refused command printed on stderr (checked: exit 2, no traceback)."""
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, (result.stdout, result.stderr, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize(("content", "says"), CASES, ids=["latin", "foreign", "not-json"])
def test_history_push_refuses_a_result_it_cannot_read(
    tmp_path: Path, content: bytes, says: str
) -> None:
    (tmp_path / "result.json").write_bytes(content)
    db = tmp_path / "h.sqlite"
    line = refused(["history", "push", str(tmp_path), "--db", str(db)])
    assert line.startswith(f"{tmp_path / 'result.json'}: {says}"), line
    assert "validation error" not in line
    assert not db.exists()


@pytest.mark.parametrize(("content", "says"), CASES, ids=["latin", "foreign", "not-json"])
def test_replay_from_refuses_a_result_it_cannot_read(
    tmp_path: Path, content: bytes, says: str
) -> None:
    result = tmp_path / "result.json"
    result.write_bytes(content)
    line = refused(["replay", "--from", str(result), "--no-live"])
    assert line.startswith(f"{result}: {says}"), line


def test_a_run_directory_without_a_result_is_named(tmp_path: Path) -> None:
    line = refused(["history", "push", str(tmp_path), "--db", str(tmp_path / "h.sqlite")])
    assert line == f"{tmp_path / 'result.json'}: cannot read: No such file or directory"
