"""disk-fill on the sandbox: a primary whose disk is full dies of ENOSPC as mongod does (exit
14, event `fatal`), the set fails over, and the member is back once the space is freed; after a
SIGKILLed run, `rsdrill recover` frees the disk and unmounts the members' disks. The same on
local members whose dbpaths are filesystems of their own (a tmpfs each, mounted by the user)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from rsdrill.connection import ConnectOptions, answers_hello
from rsdrill.engine.actions import carry_out
from rsdrill.engine.options import RunOptions
from rsdrill.engine.runner import run_experiment
from rsdrill.experiment.loader import load_experiment
from rsdrill.experiment.schema import Experiment
from rsdrill.platforms.local.target import make_target
from rsdrill.platforms.machine.disk_fill import FILLER, disk_fill, small_disk_mounts
from rsdrill.platforms.machine.local_hosts import listening_pid
from rsdrill.sandbox.cluster import Sandbox
from tests.e2e.local_set import local_target
from tests.e2e.test_run_cli import _recover, _start, _wait_for_text
from tests.harness.cli import rsdrill_run

EXPERIMENT = Path(__file__).resolve().parents[2] / "experiments" / "primary-disk-fill.yaml"


def test_a_full_disk_ends_the_primary_as_mongod_and_the_set_fails_over(
    tmp_path: Path, free_port_base: Callable[[int], int]
) -> None:
    document = yaml.safe_load(EXPERIMENT.read_text())
    document["target"]["port_base"] = free_port_base(3)
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(document))
    out = tmp_path / "out"
    result = run_experiment(load_experiment(path), RunOptions(out_dir=out, live=False))
    assert result.verdict == "pass", (result.error, result.slo)
    (fault,) = result.faults
    events = [json.loads(line) for line in
              (out / "sandbox" / "members" / fault.target.rsplit(":", 1)[1] / "events.jsonl")
              .read_text().splitlines()]  # fmt: skip
    fatal = [e for e in events if e["event"] == "fatal"]
    assert fatal and "full" in fatal[0]["error"], fatal
    assert result.metrics.failover_s is not None and result.metrics.failover_s < 5
    assert result.metrics.recovery_s[fault.target] is not None
    assert not small_disk_mounts(out / "sandbox")


def test_recover_frees_and_unmounts_the_disks_of_a_killed_run(
    tmp_path: Path, free_port_base: Callable[[int], int]
) -> None:
    path = tmp_path / "exp.yaml"
    path.write_text(
        "name: disk-fill-killed\n"
        f"target: {{platform: sandbox, topology: rs3, port_base: {free_port_base(3)}}}\n"
        "faults:\n  - {at: 1s, kind: disk-fill, select: secondary, fill_percent: 90, "
        "duration: 120s}\n"
    )
    out = tmp_path / "out"
    proc = _start(tmp_path, path)
    try:
        _wait_for_text(proc, "injected disk-fill", 90)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        assert len(small_disk_mounts(out / "sandbox")) == 3
        recover = _recover(tmp_path)
        assert recover.returncode == 0, recover.stdout + recover.stderr
        assert "its disk freed" in recover.stdout, recover.stdout
        assert "unmounted 3 member disk(s)" in recover.stdout, recover.stdout
        assert not small_disk_mounts(out / "sandbox")
        assert not Sandbox(out / "sandbox").running()
    finally:
        if proc.poll() is None:
            proc.kill()
        if (out / "sandbox" / "members").exists():
            Sandbox(out / "sandbox").down()
        for mountpoint in small_disk_mounts(out / "sandbox"):
            subprocess.run(["umount", "-l", str(mountpoint)], check=False)


def _used_percent(path: Path) -> float:
    """How full the filesystem of `path` is, as df says it (statfs)."""
    st = os.statvfs(path)
    return 100 * (1 - st.f_bavail / st.f_blocks)


def _dbpaths(directory: Path) -> dict[str, Path]:
    return {m["host"]: Path(m["dbpath"]) for m in local_target(directory)["members"]}


def test_local_disk_fill_fills_the_members_own_disk_and_full_ends_it_as_mongod(
    tmp_path: Path, existing_set_on_own_disks: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = existing_set_on_own_disks
    dbpaths = _dbpaths(directory)
    # 60 %: statfs (and so df) shows it, and the member goes on serving.
    experiment = Experiment.model_validate({
        "name": "local-disk-fill", "target": local_target(directory),
        "faults": [{"at": "1s", "kind": "disk-fill", "select": "secondary", "fill_percent": 60,
                    "duration": "5s"}],
    })  # fmt: skip
    target = make_target(experiment, tmp_path / "direct")
    target.setup()
    host = next(iter(dbpaths))
    before = _used_percent(dbpaths[host])
    fill = disk_fill(target, experiment.faults[0], host)
    fill.inject()
    assert 59 <= _used_percent(dbpaths[host]) <= 62, _used_percent(dbpaths[host])
    assert fill.verify(1.0)
    assert answers_hello(host, options=target.connect_options)
    # Freed as `rsdrill recover` would, from the journaled action alone.
    action = fill.revert_action()
    assert action is not None
    assert "its disk freed" in carry_out(action)
    assert _used_percent(dbpaths[host]) <= before + 1
    # 100 %: the primary's next write fails with ENOSPC and it exits as mongod does; the set
    # fails over, and revert frees the disk and restarts it with its own command.
    monkeypatch.setenv("RSDRILL_ALLOW", "rs0")
    experiment = Experiment.model_validate({
        "name": "local-disk-fill-full", "target": local_target(directory),
        "faults": [{"at": "2s", "kind": "disk-fill", "select": "primary", "fill_percent": 100,
                    "duration": "4s"}],
        "observe": {"after_revert": "15s"},
        "slo": {"failover_s": "<= 5", "lost_acknowledged_writes": "== 0"},
    })  # fmt: skip
    result = run_experiment(experiment, RunOptions(out_dir=tmp_path / "out", live=False,
                                                   journal_dir=tmp_path))  # fmt: skip
    assert result.verdict == "pass", (result.error, result.slo)
    (fault,) = result.faults
    port = fault.target.rsplit(":", 1)[1]
    events = [json.loads(line) for line in
              (directory / "members" / port / "events.jsonl").read_text().splitlines()]  # fmt: skip
    fatal = [e for e in events if e["event"] == "fatal"]
    assert fatal and "full" in fatal[0]["error"], fatal
    assert result.metrics.recovery_s[fault.target] is not None
    assert listening_pid(int(port)) is not None  # restarted by its own command
    assert not (dbpaths[fault.target] / FILLER).exists()
    assert _used_percent(dbpaths[fault.target]) < 50


def test_local_disk_fill_refuses_a_dbpath_that_is_not_its_own_filesystem(
    tmp_path: Path, existing_set: Path
) -> None:
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({
        "name": "local-disk-fill-shared", "target": local_target(existing_set),
        "faults": [{"at": "1s", "kind": "disk-fill", "duration": "5s"}],
    }))  # fmt: skip
    done = rsdrill_run(["check", str(path)],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert "dbpath" in done.stdout and "is not a mount point" in done.stdout, done.stdout


def test_recover_frees_a_local_members_disk_after_a_killed_run(
    tmp_path: Path, existing_set_on_own_disks: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = existing_set_on_own_disks
    dbpaths = _dbpaths(directory)
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({
        "name": "local-disk-fill-killed", "target": local_target(directory),
        "faults": [{"at": "1s", "kind": "disk-fill", "select": "secondary", "fill_percent": 90,
                    "duration": "120s"}],
    }))  # fmt: skip
    monkeypatch.setenv("RSDRILL_ALLOW", "rs0")  # the set's name: rsdrill may act on it
    proc = _start(tmp_path, path, "--yes")
    try:
        _wait_for_text(proc, "injected disk-fill", 90)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        (full,) = [h for h, p in dbpaths.items() if (p / FILLER).exists()]
        assert _used_percent(dbpaths[full]) >= 89
        recover = _recover(tmp_path)
        assert recover.returncode == 0, recover.stdout + recover.stderr
        assert "its disk freed" in recover.stdout, recover.stdout
        assert not (dbpaths[full] / FILLER).exists()
        assert _used_percent(dbpaths[full]) < 50
        assert answers_hello(full, options=ConnectOptions())
    finally:
        if proc.poll() is None:
            proc.kill()
