"""Guards and abort conditions end to end, against real sandbox member processes.

Each guard refuses with its own message before anything is injected (verdict aborted, exit 3,
no fault in the result, every member still running); an abort condition that holds during a
run stops injecting and reverts every fault in force.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient, WriteConcern

from rsdrill.connection import ConnectOptions, DirectConnection
from rsdrill.engine.options import RunOptions
from rsdrill.engine.runner import run_experiment
from rsdrill.engine.selection import current_states
from rsdrill.experiment.schema import Experiment
from rsdrill.result import Result
from rsdrill.sandbox.cluster import Sandbox
from rsdrill.sandbox.config import ReplSetSpec
from tests.e2e.local_set import local_target, set_uri
from tests.harness.cli import rsdrill_run

FAST = {"platform": "sandbox", "topology": "rs3", "election_timeout": "1s", "keep": True}


@pytest.fixture
def kept(tmp_path: Path) -> Iterator[Path]:
    """The run's sandbox directory; the runs keep their sandbox, stopped here afterwards."""
    directory = tmp_path / "out" / "sandbox"
    yield directory
    Sandbox(directory).down(grace_s=2.0)


def _run(tmp_path: Path, spec: dict[str, Any], **options: Any) -> Result:
    return run_experiment(
        Experiment.model_validate(spec),
        RunOptions(out_dir=tmp_path / "out", live=False, journal_dir=tmp_path, **options),
    )


def _assert_refused(result: Result, guard: str) -> None:
    assert (result.verdict, result.exit_code) == ("aborted", 3), result.error
    assert result.error is not None and result.error.startswith(f"{guard} guard: "), result.error
    assert result.faults == []


def _assert_all_running(sandbox_dir: Path) -> None:
    states = {s.name: s.state for s in Sandbox(sandbox_dir).status()}
    assert all(s in ("PRIMARY", "SECONDARY") for s in states.values()), states


def _primary(sandbox_dir: Path) -> str:
    members = [m.host for m in ReplSetSpec.read(sandbox_dir).members]
    states = current_states(members, timeout_s=1.0, options=ConnectOptions())
    return next(h for h, s in states.items() if s == "PRIMARY")


def _write_one(conn: DirectConnection) -> None:
    reply = conn.command("guards_test", {"insert": "lag", "documents": [{}],
                                         "writeConcern": {"w": 1}})  # fmt: skip
    assert reply["ok"], reply


def _pids(sandbox_dir: Path) -> dict[str, int | None]:
    return {s.name: s.pid for s in Sandbox(sandbox_dir).status()}


# -- one test per guard ---------------------------------------------------------------------------


def test_quorum_guard_refuses_two_of_three_members_down_at_once(tmp_path: Path, kept: Path) -> None:
    result = _run(tmp_path, {
        "name": "quorum-loss",
        "target": FAST,
        "faults": [
            {"at": "2s", "kind": "host-kill", "select": "primary", "duration": "5s"},
            {"at": "4s", "kind": "host-freeze", "select": "secondary", "duration": "2s"},
        ],
    })  # fmt: skip
    _assert_refused(result, "quorum")
    assert "faults[0] and faults[1] take 2 members down at once" in result.error
    assert "majority of 2" in result.error and "allow_quorum_loss" in result.error
    _assert_all_running(kept)


def test_member_health_guard_refuses_a_lagging_secondary(tmp_path: Path, kept: Path) -> None:
    def stall_replication(phase: str) -> None:
        """Before the guards: the primary stops serving its oplog, then takes writes."""
        if phase != "guards":
            return
        conn = DirectConnection(_primary(kept), 5.0, ConnectOptions())
        try:
            failpoint = {"failCommands": ["rsdrillGetOplog"], "errorCode": 13436}
            reply = conn.command("admin", {"configureFailPoint": "failCommand",
                                           "mode": "alwaysOn", "data": failpoint})  # fmt: skip
            assert reply["ok"], reply
            # Two writes 1.5 s apart: a fetch in flight may still carry the first, never the
            # second, which the secondaries then lack by 1.5 s of its wall time.
            _write_one(conn)
            time.sleep(1.5)  # the time under test: the lag is the wall time between the writes
            _write_one(conn)
        finally:
            conn.close()

    result = _run(tmp_path, {
        "name": "lagging",
        # Heartbeats from the primary (not only its oplog's replies) keep the elections off.
        "target": {**FAST, "heartbeat_interval": "200ms"},
        "guards": {"max_lag_before_start": "1s"},
        "faults": [{"at": "2s", "kind": "host-kill", "select": "secondary", "duration": "2s"}],
    }, on_phase=stall_replication)  # fmt: skip
    _assert_refused(result, "member health")
    assert "behind the primary (guards.max_lag_before_start: 1s)" in result.error
    _assert_all_running(kept)


def test_oplog_window_guard_refuses_an_outage_longer_than_the_window(
    tmp_path: Path, kept: Path
) -> None:
    def fill_oplog(phase: str) -> None:
        """Before the guards: 1.5 MB of writes through a 1 MB oplog, every member keeping up."""
        if phase != "guards":
            return
        with MongoClient(set_uri(kept), serverSelectionTimeoutMS=10_000) as client:
            coll = client.guards_test.get_collection("fill", write_concern=WriteConcern(w=3))
            for first in range(0, 1500, 100):
                coll.insert_many([{"_id": i, "pad": "p" * 1000} for i in range(first, first + 100)])

    result = _run(tmp_path, {
        "name": "oplog-overrun",
        "target": {**FAST, "oplog_size_mb": 1},
        "faults": [{"at": "2s", "kind": "host-kill", "select": "secondary", "duration": "30s"}],
    }, on_phase=fill_oplog)  # fmt: skip
    _assert_refused(result, "oplog window")
    assert "faults[0] (host-kill) keeps a member down for 30s" in result.error
    assert "full initial sync" in result.error and "allow_oplog_overrun" in result.error
    _assert_all_running(kept)


def test_allowlist_guard_refuses_a_set_not_listed(
    tmp_path: Path, existing_set: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RSDRILL_ALLOW", "staging, qa")
    before = _pids(existing_set)
    result = _run(tmp_path, {
        "name": "not-allowed",
        "target": local_target(existing_set),
        "faults": [{"at": "1s", "kind": "host-kill", "select": "primary", "duration": "2s"}],
    }, assume_yes=True)  # --yes does not override RSDRILL_ALLOW  # fmt: skip
    _assert_refused(result, "allowlist")
    assert "replica set 'rs0' is not in RSDRILL_ALLOW (staging, qa)" in result.error
    assert _pids(existing_set) == before
    _assert_all_running(existing_set)


def test_allowlist_guard_refuses_without_a_terminal_or_yes(
    tmp_path: Path, existing_set: Path
) -> None:
    import yaml

    experiment = tmp_path / "local.yaml"
    experiment.write_text(yaml.safe_dump({
        "name": "unconfirmed",
        "target": local_target(existing_set),
        "faults": [{"at": "1s", "kind": "host-kill", "select": "primary", "duration": "2s"}],
    }))  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "RSDRILL_ALLOW"}
    before = _pids(existing_set)
    proc = rsdrill_run(
        ["run", str(experiment), "--no-live",
         "--out", str(tmp_path / "out")],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={**env, "RSDRILL_HOME": str(tmp_path / "home")},
    )  # fmt: skip
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "unconfirmed: ABORTED (allowlist guard: replica set 'rs0'" in proc.stdout
    assert "RSDRILL_ALLOW=rs0" in proc.stdout and "--yes" in proc.stdout
    assert _pids(existing_set) == before
    _assert_all_running(existing_set)


# -- abort conditions -----------------------------------------------------------------------------


def test_abort_condition_stops_injecting_and_reverts(tmp_path: Path, kept: Path) -> None:
    result = _run(tmp_path, {
        "name": "abort-no-primary",
        "target": FAST,
        "faults": [
            {"at": "2s", "kind": "host-kill", "select": "primary", "duration": "60s"},
            {"at": "15s", "kind": "stepdown", "select": "primary"},
        ],
        "abort_on": ["no_primary_s > 0.5"],
    })  # fmt: skip
    assert (result.verdict, result.exit_code) == ("aborted", 3), result.error
    assert result.error is not None
    assert result.error.startswith("abort condition `no_primary_s > 0.5` held: no_primary_s was")
    observed = float(result.error.rsplit(" ", 1)[1])
    assert 0.5 < observed < 1.0
    [killed] = result.faults  # the second fault was never injected
    assert killed.injected_at_s is not None and killed.reverted_at_s is not None
    assert killed.reverted_at_s - killed.injected_at_s < 5
    assert result.duration_s < 15
    deadline = time.monotonic() + 30
    while any(s.state not in ("PRIMARY", "SECONDARY") for s in Sandbox(kept).status()):
        assert time.monotonic() < deadline, Sandbox(kept).status()
        time.sleep(0.2)


def test_abort_on_option_aborts_a_run_and_reverts(tmp_path: Path, kept: Path) -> None:
    experiment = tmp_path / "exp.yaml"
    experiment.write_text(
        "name: abort-cli\n"
        "target: {platform: sandbox, topology: rs3, election_timeout: 1s, keep: true}\n"
        "faults:\n  - {at: 2s, kind: host-kill, select: primary, duration: 60s}\n"
        "slo: {write_unavailable_s: '<= 60'}\n"
    )
    proc = rsdrill_run(
        ["run", str(experiment), "--no-live",
         "--out", str(tmp_path / "out"),
         "--abort-on", "probe_error_rate > 0.99", "--abort-on", "write_unavailable_s > 0.5"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={**os.environ, "RSDRILL_HOME": str(tmp_path / "home")},
    )  # fmt: skip
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "abort-cli: ABORTED (abort condition `write_unavailable_s > 0.5` held" in proc.stdout
    # The gap was still open when the run stopped: its short figure passes no SLO.
    assert "  --   write_unavailable_s <= 60 (observed " in proc.stdout, proc.stdout
    assert "(--: not judged, the run stopped before its measurement ended)" in proc.stdout
    deadline = time.monotonic() + 30
    while any(s.state not in ("PRIMARY", "SECONDARY") for s in Sandbox(kept).status()):
        assert time.monotonic() < deadline, Sandbox(kept).status()
        time.sleep(0.2)


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ("--abort-on", "--abort-on: unknown metric 'no_primary' in 'no_primary > 5'; "
                       "did you mean 'no_primary_s'?"),
        ("file", "exp.yaml:4:5: abort_on[0]: unknown metric 'no_primary' in 'no_primary > 5'; "
                 "did you mean 'no_primary_s'?"),
    ],
)  # fmt: skip
def test_bad_abort_condition_exits_2_before_anything_starts(
    tmp_path: Path, where: str, expected: str
) -> None:
    experiment = tmp_path / "exp.yaml"
    experiment.write_text(
        "name: bad-abort\ntarget: {platform: sandbox}\n"
        + ("abort_on:\n  - no_primary > 5\n" if where == "file" else "")
        + "faults:\n  - {at: 2s, kind: host-kill, select: primary, duration: 2s}\n"
    )
    extra = ["--abort-on", "no_primary > 5"] if where == "--abort-on" else []
    proc = rsdrill_run(
        ["run", str(experiment), "--no-live",
         "--out", str(tmp_path / "out"), *extra],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
        env={**os.environ, "RSDRILL_HOME": str(tmp_path / "home")},
    )  # fmt: skip
    assert proc.returncode == 2
    output = proc.stdout + proc.stderr
    assert output.strip().startswith(str(tmp_path) if where == "file" else "--abort-on")
    assert expected in output and "Traceback" not in output
    assert not (tmp_path / "out").exists() and not (tmp_path / "home").exists()
