"""`rsdrill run` and `rsdrill soak` under the fleet's lever and leases, on a sandbox: the lever
engaged by `rsdrill lever engage` while a fault is in force stops the run (the fault
reverted, verdict aborted, exit 5), and a soak at its next run; a cluster another run holds
refuses the run before its check reaches the cluster, naming the holder; a shared store
(FerretDB) gone by the run's end changes no verdict, and the run is pushed to it later, once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from rsdrill.connection import ConnectOptions, answers_hello
from rsdrill.engine.soak import soak
from rsdrill.experiment.loader import load_experiment
from rsdrill.fleet import lever
from rsdrill.fleet.gate import FleetGate, cluster_key
from rsdrill.fleet.lease import ClusterLease
from rsdrill.fleet.store import SqliteFleetStore
from rsdrill.sandbox.cluster import EmulatorEngine, up
from rsdrill.sandbox.config import Settings, build_topology
from rsdrill.store import shared_history
from tests.e2e.test_run_cli import _wait_for_text
from tests.harness.cli import Rsdrill, rsdrill_run
from tests.harness.ferretdb import ferretdb
from tests.harness.members import wait_until

pytestmark = pytest.mark.slow


def _experiment(tmp_path: Path, base: int) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(
        "name: fleet-drill\n"
        "target: {platform: sandbox, topology: rs3, election_timeout: 2s, "
        f"heartbeat_interval: 500ms, port_base: {base}}}\n"
        "probes:\n  availability: {interval: 20ms}\n"
        "faults:\n  - {at: 1s, kind: host-freeze, select: secondary, duration: 60s}\n"
        "observe: {after_revert: 1s}\n"
    )
    return path


def _env(tmp_path: Path) -> dict[str, str]:
    env = {**os.environ, "RSDRILL_HOME": str(tmp_path / "home")}
    for name in ("RSDRILL_HISTORY", "RSDRILL_FLEET_KEY", "RSDRILL_FLEET_KEY_FILE"):
        env.pop(name, None)
    return env


def _run(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return rsdrill_run(args, capture_output=True, text=True, timeout=120, env=_env(tmp_path))


def test_the_lever_stops_a_run_with_its_fault_in_force(
    tmp_path: Path, free_port_base: Callable[[int], int]
) -> None:
    out = tmp_path / "out"
    proc = Rsdrill(
        ["run", str(_experiment(tmp_path, free_port_base(3))), "--out", str(out),
         "--no-live", "--no-history"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env(tmp_path),
    )  # fmt: skip
    try:
        _wait_for_text(proc, "injected host-freeze", 90)
        engaged = time.monotonic()
        done = _run(["lever", "engage", "--reason", "drill stop"], tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        assert proc.wait(timeout=60) == 5
        took = time.monotonic() - engaged
    finally:
        if proc.poll() is None:
            proc.kill()
    result = json.loads((out / "result.json").read_text())
    assert result["verdict"] == "aborted" and result["exit_code"] == 5
    assert "stop lever" in result["error"] and "drill stop" in result["error"]
    [fault] = result["faults"]
    assert fault["reverted_at_s"] is not None
    # The lever is read every second; the run then reverts, analyses and tears down (the
    # issue's 5 s is measured by the bench; this bound only catches a run that ignored it).
    assert took < 20, took
    again = _run(["run", str(_experiment(tmp_path, free_port_base(3))), "--out",
                  str(tmp_path / "out2"), "--no-live", "--no-history"], tmp_path)  # fmt: skip
    assert again.returncode == 5 and "not started" in again.stderr, again.stdout + again.stderr


def test_a_cluster_another_run_holds_is_refused_naming_it_before_it_is_checked(
    tmp_path: Path, free_port_base: Callable[[int], int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lease is taken before `rsdrill run`'s check: a run must not even ask a cluster that
    another run is breaking (its primary frozen here, so the check could not pass)."""
    spec = build_topology("rs3", port_base=free_port_base(3), settings=Settings())
    sandbox = up(tmp_path / "set", spec, EmulatorEngine())
    try:
        members = ", ".join(f"{{host: '{m.host}', start: 'false'}}" for m in spec.members)
        seeds = ",".join(m.host for m in spec.members)
        path = tmp_path / "local.yaml"
        path.write_text(
            "name: fleet-local\n"
            f"target: {{platform: local, topology: rs3, uri: 'mongodb://{seeds}/?replicaSet=rs0', "
            f"members: [{members}]}}\n"
            "faults:\n  - {at: 1s, kind: host-freeze, select: secondary, duration: 2s}\n"
        )
        cluster = cluster_key(load_experiment(path))
        assert cluster == ",".join(sorted(m.host for m in spec.members))
        store = SqliteFleetStore(tmp_path / "home" / "fleet.sqlite")
        holder = ClusterLease(store, None, cluster, "the nightly run")
        holder.take()
        frozen = [sandbox.pid(m) for m in spec.members]
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)  # the holder's fault
        try:
            out = tmp_path / "out"
            env = {**_env(tmp_path), "RSDRILL_ALLOW": "rs0"}
            done = rsdrill_run(["run", str(path), "--out", str(out), "--no-live",
                                "--no-history"], capture_output=True, text=True,
                               timeout=120, env=env)  # fmt: skip
        finally:
            for pid in frozen:
                os.kill(pid, signal.SIGCONT)
            holder.release()
        assert done.returncode == 3, done.stdout + done.stderr
        assert "held by another run: experiment 'the nightly run'" in done.stderr, done.stderr
        assert "check failed" not in done.stderr and not (out / "result.json").exists()
        # Let go, the same run goes ahead (and lets go at its end).
        again = rsdrill_run(["run", str(path), "--out", str(out), "--no-live",
                             "--no-history"], capture_output=True, text=True,
                            timeout=120, env=env)  # fmt: skip
        assert again.returncode == 0, again.stdout + again.stderr
        assert store.lease(cluster) is None
    finally:
        sandbox.down()


def test_a_soak_stops_at_the_lever_and_does_not_start_under_it(tmp_path: Path) -> None:
    soak_file = Path(__file__).resolve().parents[2] / "experiments" / "soak-rs3.yaml"
    store = SqliteFleetStore(tmp_path / "home" / "fleet.sqlite")
    lever.engage(store, None, "freeze for the release")
    # In process, past the CLI's own check: the soak's first run reads the lever before it
    # builds anything, and the soak ends there with that run's exit status.
    report = soak(load_experiment(soak_file), tmp_path / "soak", duration_s=600, max_runs=3,
                  gate=FleetGate(store, None, "soak-rs3"), progress=lambda _: None)  # fmt: skip
    assert len(report.runs) == 1 and report.stopped_exit == 5, report
    assert report.stopped_by is not None and "freeze for the release" in report.stopped_by
    refused = _run(["soak", str(soak_file), "--runs", "2", "--out", str(tmp_path / "s2")],
                   tmp_path)  # fmt: skip
    assert refused.returncode == 5 and "not started" in refused.stderr, refused.stderr


def test_a_shared_store_down_at_the_end_leaves_the_verdict_and_takes_the_push_later(
    tmp_path: Path, free_port_base: Callable[[int], int]
) -> None:
    key = "fleet-key-for-tests-0123456789"
    with ferretdb(tmp_path / "ferretdb") as server:
        uri = f"mongodb://{server.host}/fleet_down"
        env = {**_env(tmp_path), "RSDRILL_HISTORY": uri, "RSDRILL_FLEET_KEY": key}
        experiment = _experiment(tmp_path, free_port_base(3))
        experiment.write_text(experiment.read_text().replace("duration: 60s", "duration: 2s"))
        out = tmp_path / "out"
        proc = Rsdrill(["run", str(experiment), "--out", str(out), "--no-live"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       env=env)  # fmt: skip
        try:
            _wait_for_text(proc, "injected host-freeze", 90)
            os.kill(server.pid() or 0, signal.SIGTERM)  # the store goes, the run goes on
            output, _ = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 0, output
        assert "history: not recorded" in output and f"rsdrill history push {out}" in output
        assert json.loads((out / "result.json").read_text())["verdict"] == "pass"
        with (tmp_path / "ferretdb-again.log").open("ab") as log:
            subprocess.Popen(server.start, shell=True, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)  # fmt: skip
        wait_until(lambda: answers_hello(server.host, timeout_s=0.5, options=ConnectOptions()),
                   30, "FerretDB again")  # fmt: skip
        for _ in range(2):
            pushed = rsdrill_run(["history", "push", str(out)], capture_output=True,
                                 text=True, timeout=60, env=env)  # fmt: skip
            assert pushed.returncode == 0, pushed.stdout + pushed.stderr
        [run] = shared_history(uri)
        assert run.experiment == "fleet-drill" and run.verdict == "pass"
