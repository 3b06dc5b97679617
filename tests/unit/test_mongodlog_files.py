"""Timelines from real mongod log files as an incident leaves them: one file per member with
skewed clocks, rotated and gzipped, a crash's half-written line, a member that was never
primary, a 4.2 log, a log of gigabytes (read line by line)."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import re
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from rsdrill.experiment.mongodlog import (
    MongodLogError,
    derive_timeline,
    read_incident,
    read_logs,
)
from rsdrill.experiment.schema import Target
from tests.harness.cli import rsdrill_run

SANDBOX = Target(platform="sandbox", topology="rs3")
# True time: mongo-a, the primary, dies at 23:59:55 and is back at 00:00:42 (SECONDARY).
T0 = dt.datetime(2024, 5, 14, 23, 59, 0, tzinfo=dt.UTC)
HOST = {"a": "mongo-a:27017", "b": "mongo-b:27017", "c": "mongo-c:27017"}


def _line(clock_s: float, true_s: float, msg: str, log_id: int, c: str = "REPL",
          tz: dt.timezone = dt.UTC, **attr: Any) -> str:  # fmt: skip
    when = (T0 + dt.timedelta(seconds=true_s + clock_s)).astimezone(tz)
    entry = {"t": {"$date": when.isoformat(timespec="milliseconds")}, "s": "I", "c": c,
             "id": log_id, "ctx": "ReplCoord-0", "msg": msg, "attr": attr}  # fmt: skip
    return json.dumps(entry, separators=(",", ":"))


def _member_log(m: str, clock_s: float, tz: dt.timezone = dt.UTC) -> list[str]:
    """One member's own log of the incident, its clock `clock_s` off."""

    def line(true_s: float, msg: str, log_id: int, **attr: Any) -> str:
        return _line(clock_s, true_s, msg, log_id, tz=tz, **attr)

    def moved(true_s: float, old: str, new: str) -> str:
        return line(true_s, "Replica set state transition", 21358, oldState=old, newState=new)

    def seen(true_s: float, who: str, new: str) -> str:
        return line(true_s, "Member is in new state", 21215, hostAndPort=HOST[who], newState=new)

    start = [line(0, "MongoDB starting", 4615611, pid=7, port=27017),
             line(0.5, "Found self in config", 21393, hostAndPort=HOST[m]),
             moved(0.6, "STARTUP", "STARTUP2"), moved(1.5, "RECOVERING", "SECONDARY")]  # fmt: skip
    others = [o for o in HOST if o != m]
    start += [seen(2, o, "SECONDARY") for o in others]
    if m == "a":
        return [*start, line(10, "Election succeeded, assuming primary role", 21450, term=7),
                moved(10, "SECONDARY", "PRIMARY"),
                line(54, "Connection accepted", 22943, remote="10.0.0.9:40001"),
                # The host dies: its last line half-written, then the restart.
                line(54.9, "Connection ended", 22944)[:60],
                line(95, "MongoDB starting", 4615611, pid=8, port=27017),
                line(95.5, "Found self in config", 21393, hostAndPort=HOST[m]),
                moved(95.6, "STARTUP", "STARTUP2"),
                *[seen(96, o, "PRIMARY" if o == "b" else "SECONDARY") for o in others],
                moved(97, "STARTUP2", "RECOVERING"), moved(102, "RECOVERING", "SECONDARY"),
                moved(103, "SECONDARY", "ROLLBACK"),
                moved(104, "ROLLBACK", "SECONDARY")]  # fmt: skip
    lines = [*start, seen(10.4, "a", "PRIMARY"),
             line(65, "Member is now in state RS_DOWN", 21216, hostAndPort=HOST["a"],
                  heartbeatMessage="Connection refused")]  # fmt: skip
    if m == "b":
        lines += [line(65.5, "Starting an election, since we've seen no PRIMARY in election "
                       "timeout period", 4615652, electionTimeoutPeriodMillis=10000),
                  moved(65.6, "SECONDARY", "PRIMARY")]  # fmt: skip
    else:
        lines += [seen(66.1, "b", "PRIMARY")]
    return [*lines, seen(102.3, "a", "SECONDARY"), seen(103.2, "a", "ROLLBACK"),
            seen(104.4, "a", "SECONDARY")]  # fmt: skip


def _write(path: Path, lines: list[str]) -> Path:
    if path.suffix == ".gz":
        with gzip.open(path, "wt") as f:
            f.write("\n".join(lines) + "\n")
    else:
        path.write_text("\n".join(lines) + "\n")
    return path


def _timeline(paths: list[Path], member: str | None = None) -> tuple[list[Any], str]:
    events, clocks = read_incident(paths, member)
    timeline = derive_timeline(events, "t", SANDBOX, f"derived{clocks}")
    return [(e.at, e.kind, e.duration) for e in timeline.events], timeline.description


def test_three_members_logs_with_skewed_clocks_give_one_kill_on_one_clock(tmp_path: Path) -> None:
    # b's clock 25 s fast, c's 7 s slow; a's log in +02:00 and rotated: its older part gzipped.
    a = _member_log("a", 0.0, tz=dt.timezone(dt.timedelta(hours=2)))
    (tmp_path / "b").mkdir()
    paths = [_write(tmp_path / "b" / "mongod.log", _member_log("b", 25.0)),
             _write(tmp_path / "mongod-a.log.1.gz", a[:6]),
             _write(tmp_path / "mongod-a.log", a[6:]),
             _write(tmp_path / "mongod-c.log", _member_log("c", -7.0))]  # fmt: skip
    events, description = _timeline(paths)
    # c saw a go down first (65), a SECONDARY again at 102: one clock, whatever the files'.
    assert len(events) == 1 and events[0][1] == "host-kill"
    assert events[0][2] == pytest.approx(37.0, abs=0.5)
    # On b's clock (the first file's): a's 25 s behind it, c's 32 s.
    moved = re.findall(r"(mongo-\w):27017 \+([\d.]+) s", description)
    assert [(m, pytest.approx(float(s), abs=0.5)) for m, s in moved] == [
        ("mongo-a", 25.0),
        ("mongo-c", 32.0),
    ]


def test_the_primarys_own_log_cut_by_the_crash_is_a_kill_from_its_last_line(
    tmp_path: Path,
) -> None:
    events, _ = _timeline([_write(tmp_path / "mongod.log", _member_log("a", 0.0))])
    assert events == [(0.0, "host-kill", 48.0)]  # from its last whole line (54) to 102


def test_a_member_that_was_never_primary_saw_the_primary_go(tmp_path: Path) -> None:
    events, _ = _timeline([_write(tmp_path / "mongod.log", _member_log("c", -7.0))])
    assert events == [(0.0, "host-kill", pytest.approx(37.3))]  # RS_DOWN at 65, back at 102.3


def test_gzipped_logs_are_read(tmp_path: Path) -> None:
    plain = _write(tmp_path / "mongod.log", _member_log("b", 0.0))
    packed = _write(tmp_path / "mongod.log.2.gz", _member_log("b", 0.0))
    assert read_logs([packed]) == [
        e.__class__(**{**e.__dict__, "source": str(packed)}) for e in read_logs([plain])
    ]


def test_two_members_logs_that_do_not_name_their_member_are_refused(tmp_path: Path) -> None:
    unnamed = [[x for x in _member_log(m, 0.0) if '"id":21393' not in x] for m in "bc"]
    paths = [_write(tmp_path / f"{m}.log", lines) for m, lines in zip("bc", unnamed, strict=True)]
    for member in (None, "mongo-b:27017"):
        with pytest.raises(MongodLogError, match=r"c\.log: which member's log is this\?"):
            read_logs(paths, member)


def test_a_42_plain_text_log_is_refused_at_its_first_line(tmp_path: Path) -> None:
    log = tmp_path / "mongod.log"
    log.write_text(
        "2024-05-14T23:59:55.120+0200 I  REPL     [replexec-3] transition to PRIMARY from "
        "SECONDARY\n"
    )
    with pytest.raises(MongodLogError, match=r"mongod\.log:1: a plain-text log line \(MongoDB 4"):
        read_logs([log])


def test_no_fault_names_the_files(tmp_path: Path) -> None:
    quiet = _write(tmp_path / "quiet.log", _member_log("b", 0.0)[:6])
    with pytest.raises(MongodLogError, match=r"quiet\.log: no fault found"):
        _timeline([quiet])


def test_a_password_in_a_log_s_host_names_is_masked(tmp_path: Path) -> None:
    lines = [x.replace('"attr"', '"host":"mongodb://ops:hunter2@mongo-b:27017","attr"')
             for x in _member_log("b", 0.0)]  # fmt: skip
    events, clocks = read_incident([_write(tmp_path / "merged.log", lines)])
    timeline = derive_timeline(events, "t", SANDBOX, f"derived{clocks}")
    assert "hunter2" not in timeline.to_yaml()


def test_a_big_log_is_read_line_by_line(tmp_path: Path) -> None:
    noise = _line(0, 30, "Connection accepted", 22943, c="NETWORK", remote="10.0.0.9:4") + "\n"
    lines = _member_log("b", 0.0)
    log = tmp_path / "mongod.log"
    with log.open("w") as f:
        f.write("\n".join(lines[:8]) + "\n" + noise * 150_000 + "\n".join(lines[8:]) + "\n")
    assert log.stat().st_size > 20_000_000
    tracemalloc.start()
    try:
        events = read_logs([log])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(events) == len([x for x in lines if '"id":2' in x or '"id":46' in x]) - 1
    assert peak < 5_000_000, peak  # the whole file would be 20 MB and more


def test_the_cli_derives_from_member_logs_with_a_readable_refusal(tmp_path: Path) -> None:
    good = _write(tmp_path / "mongod-c.log.gz", _member_log("c", -7.0))
    bad = tmp_path / "broken.log"
    bad.write_text(_member_log("c", 0.0)[0] + '\n{"t": {"$date": "2024"}, "oops"}\n')
    ok = rsdrill_run(["timeline", "from-mongod-log", str(good)], capture_output=True, text=True,
                     timeout=60)  # fmt: skip
    assert ok.returncode == 0 and "kind: host-kill" in ok.stdout, ok.stderr
    refused = rsdrill_run(["timeline", "from-mongod-log", str(bad)], capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.strip() == f"{bad}:2: not a JSON log line: Expecting ':' delimiter"


def test_logs_on_one_clock_are_left_alone() -> None:
    # mongo-b saw mongo-a SECONDARY 8 ms after it was: a heartbeat's latency, not a skew.
    sample = Path(__file__).parent.parent / "fixtures" / "mongod-incident.log"
    events, clocks = _timeline([sample])
    assert clocks == "derived" and events[0] == (0.0, "host-kill", 4.0)
