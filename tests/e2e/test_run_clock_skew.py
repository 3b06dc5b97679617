"""clock-skew on the sandbox: the member's wall clock (hello's localTime, the oplog's times and
so $clusterTime) moves by the offset while elections do not notice; revert sets it right but
timestamps stay monotonic. On local members the same through libfaketime: the run restarts them
under it, and `rsdrill recover` sets a killed run's skew right."""

from __future__ import annotations

import datetime as dt
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from pymongo import MongoClient

from rsdrill.connection import ConnectOptions
from rsdrill.engine.actions import carry_out
from rsdrill.engine.options import RunOptions
from rsdrill.engine.runner import run_experiment
from rsdrill.experiment.loader import load_experiment
from rsdrill.experiment.schema import Experiment
from rsdrill.platforms.base import TargetError
from rsdrill.platforms.local.target import make_target
from rsdrill.platforms.machine import faketime
from rsdrill.platforms.machine.clock import ClockSkew, clock_skew
from rsdrill.platforms.machine.local_hosts import listening_pid
from rsdrill.sandbox.cluster import EmulatorEngine, up
from rsdrill.sandbox.config import build_topology
from tests.e2e.local_set import local_target, set_uri
from tests.e2e.test_run_cli import _recover, _start, _wait_for_text

EXPERIMENT = Path(__file__).resolve().parents[2] / "experiments" / "primary-clock-skew.yaml"
HOUR = 3600
INSTALL = Path(__file__).resolve().parents[2] / ".ci" / "install-faketime"


def _skew_of(client: MongoClient[dict[str, object]]) -> float:
    local = client.admin.command("hello")["localTime"].replace(tzinfo=dt.UTC)
    return (local - dt.datetime.now(dt.UTC)).total_seconds()


def test_the_members_clock_and_cluster_time_move_then_the_clock_comes_back(
    sandbox_dir: Path, free_port_base: Callable[[int], int]
) -> None:
    sandbox = up(sandbox_dir, build_topology("rs1", port_base=free_port_base(1)),
                 EmulatorEngine())  # fmt: skip
    host = sandbox.spec.members[0].host
    with MongoClient(sandbox.uri, directConnection=True) as client:
        coll = client.db.c
        before = client.admin.command("ping")["$clusterTime"]["clusterTime"]
        assert abs(_skew_of(client)) < 2
        skew = ClockSkew(host, HOUR, 0.0, ConnectOptions())
        assert not skew.verify(0.3)  # not injected: the clock is right, not an hour ahead
        skew.inject()
        assert skew.verify(2.0)
        assert abs(_skew_of(client) - HOUR) < 2
        coll.insert_one({"during": True})
        entry = client.local.oplog.rs.find_one({"o.during": True})
        assert entry is not None
        assert entry["ts"].time - before.time > HOUR - 5
        assert abs((entry["wall"].replace(tzinfo=dt.UTC) - dt.datetime.now(dt.UTC))
                   .total_seconds() - HOUR) < 5  # fmt: skip
        ahead = client.admin.command("ping")["$clusterTime"]["clusterTime"]
        assert ahead.time - before.time > HOUR - 5
        # Revert as `rsdrill recover` would, from the journaled action alone.
        action = skew.revert_action()
        assert action is not None
        assert "clock back to real time" in carry_out(action)
        assert abs(_skew_of(client)) < 2
        coll.insert_one({"after": True})
        later = client.local.oplog.rs.find_one({"o.after": True})
        assert later is not None and later["ts"] > entry["ts"]  # never back in time


def test_a_drifting_clock_gains_on_real_time_until_reverted(
    sandbox_dir: Path, free_port_base: Callable[[int], int]
) -> None:
    """clock_drift: the member's clock gains `drift` seconds per second from the injection on
    (here 0.5 s/s: about 1 s in 2 s), and verify follows the drift."""
    sandbox = up(sandbox_dir, build_topology("rs1", port_base=free_port_base(1)),
                 EmulatorEngine())  # fmt: skip
    host = sandbox.spec.members[0].host
    with MongoClient(sandbox.uri, directConnection=True) as client:
        skew = ClockSkew(host, 0.0, 0.5, ConnectOptions())
        skew.inject()
        assert skew.verify(2.0)
        first = _skew_of(client)
        time.sleep(2.0)  # the drift under test is what 2 s of real time adds
        gained = _skew_of(client) - first
        assert 0.6 <= gained <= 1.4, gained
        assert skew.verify(2.0)
        skew.revert()
        assert abs(_skew_of(client)) < 0.5


def test_a_skewed_primary_neither_fails_over_nor_loses_writes(
    tmp_path: Path, free_port_base: Callable[[int], int]
) -> None:
    document = yaml.safe_load(EXPERIMENT.read_text())
    document["target"]["port_base"] = free_port_base(3)
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(document))
    result = run_experiment(load_experiment(path), RunOptions(out_dir=tmp_path / "out",
                                                              live=False))  # fmt: skip
    assert result.verdict == "pass", (result.error, result.slo)
    assert result.metrics.failover_s is None


@pytest.fixture
def libfaketime() -> None:
    """Local clock-skew preloads libfaketime: installed by the project's script when missing."""
    if faketime.library() is None:
        subprocess.run([str(INSTALL)], check=True, timeout=300)
    assert faketime.library(), f"{INSTALL} did not install libfaketime"


def _pids(directory: Path) -> dict[str, int | None]:
    return {m["host"]: listening_pid(int(m["host"].rsplit(":", 1)[1]))
            for m in local_target(directory)["members"]}  # fmt: skip


def _local_skew(directory: Path, **fault: object) -> dict[str, object]:
    return {
        "name": "local-clock-skew", "target": local_target(directory),
        "faults": [{"at": "2s", "kind": "clock-skew", "select": "primary", "clock_offset": HOUR,
                    "duration": "4s", **fault}],
        "observe": {"after_revert": "2s"},
        # Members under libfaketime answer as without it (its monotonic fix off: else their
        # timed waits end at once and they spin, rsdrill/platforms/machine/faketime.py), and
        # moving the wall clock takes no election: writes never stop for long.
        "slo": {"lost_acknowledged_writes": "== 0", "write_unavailable_s": "<= 3"},
    }  # fmt: skip


def test_local_members_run_under_libfaketime_and_the_skew_moves_their_own_clock(
    tmp_path: Path, existing_set: Path, libfaketime: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    experiment = Experiment.model_validate(_local_skew(existing_set))
    # Without libfaketime the run is refused before anything changes, in one line.
    monkeypatch.setattr(faketime, "_LIBRARY_GLOBS", ())
    with pytest.raises(TargetError, match=r"needs libfaketime.*apt-get install libfaketime"):
        make_target(experiment, tmp_path / "none").setup()
    monkeypatch.undo()
    before = _pids(existing_set)
    assert not any(faketime.offset_file_of(p) for p in before.values() if p)
    monkeypatch.setenv("RSDRILL_ALLOW", "rs0")
    result = run_experiment(experiment, RunOptions(out_dir=tmp_path / "out", live=False,
                                                   journal_dir=tmp_path))  # fmt: skip
    assert result.verdict == "pass", (result.error, result.slo)
    (fault,) = result.faults
    assert fault.verified_at_s is not None  # the primary's own hello read the skew
    assert fault.injected_at_s is not None and fault.verified_at_s - fault.injected_at_s < 5
    after = _pids(existing_set)
    assert all(after[h] not in (None, before[h]) for h in after), (before, after)
    assert all(faketime.offset_file_of(p) for p in after.values() if p)
    # A second run finds them under libfaketime: no restart; its skew is what hello says.
    target = make_target(experiment, tmp_path / "again")
    target.setup()
    target.prepare()
    assert _pids(existing_set) == after
    with MongoClient(set_uri(existing_set), serverSelectionTimeoutMS=10_000) as client:
        client.admin.command("ping")  # waits for the set's primary to be selected
        primary = client.primary
    assert primary is not None
    host = f"{primary[0]}:{primary[1]}"
    skew = clock_skew(target, experiment.faults[0], host)
    with MongoClient(host, directConnection=True) as client:
        assert not skew.verify(0.3)  # not injected: the clock is right, not an hour ahead
        skew.inject()
        assert skew.verify(5.0)  # libfaketime reads its offset file once a second
        assert abs(_skew_of(client) - HOUR) < 2
        client.db.c.insert_one({"during": True})
        entry = client.local.oplog.rs.find_one({"o.during": True})
        assert entry is not None
        assert abs((entry["wall"].replace(tzinfo=dt.UTC) - dt.datetime.now(dt.UTC))
                   .total_seconds() - HOUR) < 5  # fmt: skip
        action = skew.revert_action()
        assert action is not None
        assert "clock back to real time" in carry_out(action)
        assert _settles(client, 0.0)
    # A run that dies while restarting them: `rsdrill recover` starts the one left down, under
    # libfaketime again, from the journaled resource action alone.
    # Killed as a host-kill does: what libfaketime shared in /dev/shm goes with the process.
    shared = Path(f"/dev/shm/faketime_shm_{after[host]}")
    assert shared.exists()
    assert target.hosts.kill(host) == after[host]
    assert not shared.exists()
    resource = target.recover_action()
    assert resource is not None
    done = carry_out(resource)
    assert f"{host}: restarted" in done and "already running" in done, done
    restarted = _pids(existing_set)[host]
    assert restarted not in (None, after[host])
    assert faketime.offset_file_of(restarted or 0) == target.hosts.clock_files[host]


def _settles(client: MongoClient[dict[str, object]], skew_s: float) -> bool:
    """The member's clock reads real time + `skew_s` within libfaketime's cache second."""
    deadline = time.monotonic() + 5
    while abs(_skew_of(client) - skew_s) >= 2:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_recover_sets_a_local_members_clock_right_after_a_killed_run(
    tmp_path: Path, existing_set: Path, libfaketime: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(_local_skew(existing_set, duration="120s")))
    monkeypatch.setenv("RSDRILL_ALLOW", "rs0")  # the set's name: rsdrill may act on it
    proc = _start(tmp_path, path, "--yes")
    try:
        seen = _wait_for_text(proc, "injected clock-skew", 120)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        host = seen.split("injected clock-skew on ", 1)[1].split()[0]
        with MongoClient(host, directConnection=True) as client:
            assert _settles(client, HOUR)  # the killed run's skew stays in force
            recover = _recover(tmp_path)
            assert recover.returncode == 0, recover.stdout + recover.stderr
            assert "clock back to real time" in recover.stdout, recover.stdout
            assert _settles(client, 0.0)
    finally:
        if proc.poll() is None:
            proc.kill()
