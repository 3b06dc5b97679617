"""disk-fill on the sandbox: a primary whose disk is full dies of ENOSPC as mongod does (exit
14, event `fatal`), the set fails over, and the member is back once the space is freed; after a
SIGKILLed run, `rsdrill recover` frees the disk and unmounts the members' disks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import yaml

from rsdrill.engine.runner import RunOptions, run_experiment
from rsdrill.experiment.loader import load_experiment
from rsdrill.platforms.machine.disk_fill import small_disk_mounts
from rsdrill.sandbox.cluster import Sandbox
from tests.e2e.test_run_cli import _wait_for_text

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
    env = {**os.environ, "RSDRILL_HOME": str(tmp_path / "home")}
    cli = [sys.executable, "-m", "rsdrill.cli"]
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [*cli, "run", str(path), "--out", str(out), "--no-live", "--no-history"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )  # fmt: skip
    try:
        _wait_for_text(proc, "injected disk-fill", 90)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        assert len(small_disk_mounts(out / "sandbox")) == 3
        recover = subprocess.run([*cli, "recover"], capture_output=True, text=True, env=env,
                                 timeout=120)  # fmt: skip
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
