"""The end of a log quoted in an error: read from the end within its bound, a cut line dropped,
passwords masked."""

from __future__ import annotations

import time
from pathlib import Path

from rsdrill.logtail import TAIL_BYTES, last_line, tail_lines
from tests.harness.procio import io_counter


def test_a_log_of_gigabytes_is_not_read_whole(tmp_path: Path) -> None:
    log = tmp_path / "member.log"
    with log.open("wb") as f:
        f.truncate(8 << 30)  # sparse: 8 GiB that take no disk
        f.seek(0, 2)
        f.write(b"older line\nmongod exited: Address already in use\n")
    before, started = io_counter("rchar"), time.monotonic()
    assert last_line(log) == "mongod exited: Address already in use"
    assert io_counter("rchar") - before < 2 * TAIL_BYTES
    assert time.monotonic() - started < 1.0


def test_a_line_the_bound_cut_is_dropped_a_whole_one_kept(tmp_path: Path) -> None:
    log = tmp_path / "log"
    log.write_text("first\nsecond\nthird\n")
    assert tail_lines(log, limit=len("second\nthird\n")) == ["second", "third"]
    assert tail_lines(log, limit=len("cond\nthird\n")) == ["third"]
    log.write_text("x" * (TAIL_BYTES + 10))  # one line longer than the bound: nothing whole
    assert tail_lines(log) == []


def test_only_what_came_after_the_offset_and_no_blank_lines(tmp_path: Path) -> None:
    log = tmp_path / "log"
    log.write_text("an earlier start\n")
    offset = log.stat().st_size
    with log.open("a") as f:
        f.write("\n  indented  \n\nlast \n\n")
    assert tail_lines(log, offset) == ["  indented", "last"]  # not cut: it starts at the offset
    assert last_line(log) == "last"


def test_a_password_is_masked_even_one_on_the_cut_line(tmp_path: Path) -> None:
    log = tmp_path / "log"
    log.write_text("connecting to mongodb://admin:S3cretPw@db1:27017/\n")
    assert last_line(log) == "connecting to mongodb://admin:***@db1:27017/"
    # Cut after its scheme, the URI would no longer look like one: the line is gone instead.
    assert tail_lines(log, limit=len("admin:S3cretPw@db1:27017/\n")) == []


def test_no_log_no_lines(tmp_path: Path) -> None:
    assert tail_lines(tmp_path / "missing.log") == []
    assert last_line(tmp_path / "missing.log") == ""
    (tmp_path / "empty.log").write_bytes(b"\n \n")
    assert last_line(tmp_path / "empty.log") == ""
