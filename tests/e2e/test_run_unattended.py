"""What a nightly job sees when something goes wrong around the run: another job writing into
the same results directory, a report that cannot be written, the CronJob's deadline, a CI
timeout's SIGTERM in a matrix or a pytest session of several runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from rsdrill.cli.app import app
from rsdrill.cronjob import DATA_DIR, EXPERIMENTS_DIR
from tests.e2e.test_run_cli import _wait_for_text
from tests.harness.cli import Rsdrill, rsdrill_run

REPO = Path(__file__).resolve().parents[2]

EXPERIMENT = """name: unattended
target: {platform: sandbox, topology: rs3, election_timeout: 1s}
probes:
  availability: {interval: 50ms, timeout: 250ms}
faults:
  - {at: 1s, kind: host-freeze, select: secondary, duration: DURATION}
observe: {after_revert: 1s}
slo:
  write_unavailable_s: "<= 15"
"""


def _experiment(tmp_path: Path, duration: str = "1s") -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(EXPERIMENT.replace("DURATION", duration))
    return path


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "RSDRILL_HOME": str(tmp_path / "home")}


def test_a_second_run_into_a_results_directory_in_use_is_refused(tmp_path: Path) -> None:
    experiment = _experiment(tmp_path, duration="30s")
    first = Rsdrill(["run", str(experiment), "--out", "out", "--no-live", "--no-history"],
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path,
                    env=_env(tmp_path))  # fmt: skip
    try:
        _wait_for_text(first, "injected host-freeze", 60)
        second = rsdrill_run(["run", str(experiment), "--out", "out", "--no-live",
                              "--no-history"], capture_output=True, text=True, cwd=tmp_path,
                             env=_env(tmp_path), timeout=60)  # fmt: skip
        # Before: exit 4 once its sandbox was refused ("stop it with rsdrill sandbox down", the
        # first run's), its reports written over the first's.
        assert second.returncode == 2, second.stdout + second.stderr
        assert second.stdout == ""
        assert second.stderr.strip() == (
            "--out out: another rsdrill run is writing its results there; give each run its "
            "own --out"
        )
        assert not (tmp_path / "out" / "result.json").exists()
    finally:
        first.terminate()  # SIGTERM: the first run reverts and reports, exit 3
        first.communicate(timeout=120)
    assert first.returncode == 3
    assert json.loads((tmp_path / "out" / "result.json").read_text())["verdict"] == "aborted"


def test_a_run_killed_outright_leaves_none_of_an_earlier_run_s_reports(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    for name in ("result.json", "junit.xml", "report.html", "summary.md", "history.jsonl"):
        (out / name).write_text("yesterday's run: PASS\n")
    run = Rsdrill(["run", str(_experiment(tmp_path, duration="30s")), "--out", str(out),
                   "--no-live", "--no-history"], stdout=subprocess.PIPE,
                  stderr=subprocess.STDOUT, text=True, env=_env(tmp_path))  # fmt: skip
    try:
        _wait_for_text(run, "injected host-freeze", 60)
        run.kill()  # the CI's SIGKILL after its timeout's grace, a lost runner
        run.communicate(timeout=30)
        # Before: CI published yesterday's junit.xml and summary.md as this night's.
        assert sorted(p.name for p in out.iterdir()) == ["sandbox"]
    finally:
        run.kill()
        recovered = rsdrill_run(["recover"], capture_output=True, text=True,
                                env=_env(tmp_path), timeout=60)  # fmt: skip
    assert recovered.returncode == 0, recovered.stdout + recovered.stderr


def test_a_report_that_cannot_be_written_is_one_line_and_exit_4(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "junit.xml").mkdir(parents=True)  # in the way, as a full disk is: an OSError
    (out / "summary.md").write_text("yesterday's run: PASS\n")
    done = rsdrill_run(["run", str(_experiment(tmp_path)), "--out", str(out), "--no-live",
                        "--no-history"], capture_output=True, text=True, env=_env(tmp_path),
                       timeout=120)  # fmt: skip
    # Before: a traceback and exit 1, which CI reads as an SLO that failed.
    assert done.returncode == 4, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout.startswith("unattended: PASS\n")
    assert f"rsdrill: cannot write {out / 'junit.xml'}: Is a directory; the run's reports are " \
           "incomplete\n" in done.stderr  # fmt: skip
    assert json.loads((out / "result.json").read_text())["verdict"] == "pass"
    assert not (out / "summary.md").exists()  # not yesterday's, taken for today's
    assert not list(out.glob(".*partial"))


def _job_script(experiment: Path, data: Path) -> str:
    """The CronJob's own script as `schedule render` writes it, its experiment swapped for a
    sandbox one and its claim for a directory here."""
    kube_experiment = REPO / "experiments" / "k8s-rs3-pod-kill.yaml"
    done = CliRunner().invoke(app, ["schedule", "render", "--cron", "@daily", str(kube_experiment)])
    assert done.exit_code == 0, done.output
    (cronjob,) = [d for d in yaml.safe_load_all(done.stdout) if d and d["kind"] == "CronJob"]
    script = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0][
        "command"][2]  # fmt: skip
    script = script.replace(f"{EXPERIMENTS_DIR}/k8s-rs3-pod-kill.yaml", str(experiment))
    return script.replace(DATA_DIR, str(data))


def _child(pid: int) -> int:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if children := Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
            return int(children[0])
        time.sleep(0.02)
    raise AssertionError(f"process {pid} started no child")


def test_the_cronjob_s_deadline_sigterm_reaches_the_run_and_its_faults_are_reverted(
    tmp_path: Path,
) -> None:
    if os.geteuid() != 0:
        pytest.skip("a PID namespace of its own (the container's) needs root")
    data = tmp_path / "claim"
    script = _job_script(_experiment(tmp_path, duration="60s"), data)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    # As in the pod: the script is PID 1 of its own PID namespace, which the kernel spares the
    # signals it has no handler for.
    pod = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", "--kill-child",
                            "/bin/sh", "-c", script], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, env=env)  # fmt: skip
    try:
        _wait_for_text(pod, "injected host-freeze", 60)
        os.kill(_child(pod.pid), signal.SIGTERM)  # the job's activeDeadlineSeconds
        out, _ = pod.communicate(timeout=60)  # before: the run went on for its 60 s fault
    finally:
        pod.kill()
        pod.wait(timeout=10)
    assert pod.returncode == 1, out
    assert "unattended: ABORTED (aborted by signal)" in out
    (result,) = data.glob("results/*/k8s-rs3-pod-kill/result.json")
    reported = json.loads(result.read_text())
    assert reported["verdict"] == "aborted"
    assert reported["faults"][0]["reverted_at_s"] is not None
    assert "runs\n" not in out and "no runs recorded" not in out  # no later step started
    # The journal is on the claim, for the next night's `recover --force`: nothing owed here.
    assert list((data / "home" / "journal").glob("*.jsonl"))
    again = rsdrill_run(["recover"], capture_output=True, text=True, timeout=60,
                        env={**os.environ, "RSDRILL_HOME": str(data / "home")})  # fmt: skip
    assert again.stdout.startswith("nothing to recover"), again.stdout + again.stderr


def test_a_sigterm_ends_a_matrix_after_the_run_it_came_in(tmp_path: Path) -> None:
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(EXPERIMENT.replace("DURATION", "30s")
                      + "matrix:\n  parameters:\n    observe.after_revert: [1s, 2s]\n")  # fmt: skip
    run = Rsdrill(["run", str(matrix), "--out", "out", "--no-live", "--no-history"],
                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path,
                  env=_env(tmp_path))  # fmt: skip
    try:
        _wait_for_text(run, "injected host-freeze", 60)
        run.terminate()
        out, _ = run.communicate(timeout=60)  # before: the second variant's 30 s fault too
    finally:
        run.kill()
    assert run.returncode == 3, out
    assert [p.name for p in (tmp_path / "out").iterdir() if p.is_dir()] == ["01-after_revert=1s"]


def test_a_sigterm_ends_a_pytest_session_after_the_run_it_came_in(tmp_path: Path) -> None:
    _experiment(tmp_path, duration="30s")
    (tmp_path / "test_chaos.py").write_text(
        "def test_first(rsdrill):\n    rsdrill.run('exp.yaml')\n\n\n"
        "def test_second(rsdrill):\n    rsdrill.run('exp.yaml')\n"
    )
    session = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly",
         "-p", "no:xdist", "--rsdrill-out", "runs", "test_chaos.py"],
        cwd=tmp_path, env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    try:
        journal = tmp_path / "home" / "journal"
        deadline = time.monotonic() + 60
        while not any('"applied"' in p.read_text() for p in journal.glob("*.jsonl")):
            assert time.monotonic() < deadline and session.poll() is None, "no fault went in"
            time.sleep(0.1)
        session.terminate()  # the CI's timeout
        out, _ = session.communicate(timeout=60)  # before: test_second broke the set too
    finally:
        session.kill()
    assert session.returncode == -signal.SIGTERM, out
    first = json.loads((tmp_path / "runs" / "test_first" / "result.json").read_text())
    assert first["verdict"] == "aborted" and first["faults"][0]["reverted_at_s"] is not None
    assert not (tmp_path / "runs" / "test_second").exists()
