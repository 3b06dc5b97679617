"""`rsdrill run` and `rsdrill recover` as a user runs them: exit codes, signals, crashes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rsdrill.sandbox.cluster import Sandbox
from tests.harness.cli import Rsdrill, rsdrill_run

FAST = "target: {platform: sandbox, topology: rs3, election_timeout: 1s, keep: KEEP}\n"


def _experiment(tmp_path: Path, fault: str, keep: bool = False) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(
        "name: cli-test\n"
        + FAST.replace("KEEP", "true" if keep else "false")
        + f"faults:\n  - {fault}\n"
        + "observe: {after_revert: 10s}\n"
    )
    return path


def _start(
    tmp_path: Path, experiment: Path, *args: str, out: str | None = None
) -> subprocess.Popen[str]:
    """The run, its results in `out` (a path as the user typed it, from `tmp_path`)."""
    return Rsdrill(
        ["run", str(experiment),
         "--out", out or str(tmp_path / "out"), "--no-live", "--no-history", *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path,
        env={**os.environ, "RSDRILL_HOME": str(tmp_path / "home")},
    )  # fmt: skip


def _recover(
    tmp_path: Path, *args: str, timeout: float = 120, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return rsdrill_run(
        ["recover", *args],
        capture_output=True, text=True, timeout=timeout, cwd=cwd or tmp_path,
        env={**os.environ, "RSDRILL_HOME": str(tmp_path / "home")},
    )  # fmt: skip


def _wait_for_text(proc: subprocess.Popen[str], text: str, timeout: float) -> str:
    """Read the run's output until `text` appears (the fault is in force)."""
    assert proc.stdout is not None
    seen = ""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        seen += line
        if text in line:
            return seen
        if not line and proc.poll() is not None:
            break
    pytest.fail(f"never saw {text!r}; output so far:\n{seen}")


def _member_pids(sandbox_dir: Path) -> list[int]:
    return [int(p.read_text()) for p in sandbox_dir.glob("members/*/pid")]


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def test_invalid_file_exits_2_and_starts_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ntarget: {platform: sandbox}\nfaults:\n  - {at: 1s, kind: host-kil}\n")
    proc = _start(tmp_path, bad)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert out.startswith(f"{bad}:4:") and "did you mean 'host-kill'" in out
    assert "Traceback" not in out and len(out.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists() and not (tmp_path / "home").exists()


def test_sigterm_reverts_every_fault_and_exits_3(tmp_path: Path) -> None:
    experiment = _experiment(
        tmp_path, "{at: 2s, kind: host-kill, select: primary, duration: 60s}", keep=True
    )
    proc = _start(tmp_path, experiment)
    _wait_for_text(proc, "injected host-kill", 60)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 3, out
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    assert result["verdict"] == "aborted"
    assert result["faults"][0]["reverted_at_s"] is not None
    sandbox = Sandbox(tmp_path / "out" / "sandbox")
    try:
        assert all(s.state != "DOWN" for s in sandbox.status()), sandbox.status()
        assert _recover(tmp_path).stdout.startswith("nothing to recover")
    finally:
        sandbox.down()


def test_a_reader_gone_mid_run_changes_nothing_but_the_output(tmp_path: Path) -> None:
    """`rsdrill run ... 2>&1 | head`: the first line printed after the reader went raised
    BrokenPipeError, and the run ended there, exit 1, without its result files, its sandbox's
    members left running for `rsdrill recover`."""
    experiment = _experiment(tmp_path, "{at: 2s, kind: stepdown, select: primary}")
    proc = _start(tmp_path, experiment)
    _wait_for_text(proc, "phase: faults", 60)
    assert proc.stdout is not None
    proc.stdout.close()
    assert proc.wait(timeout=120) == 0
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    assert result["verdict"] == "pass" and result["faults"][0]["injected_at_s"] is not None
    assert not Sandbox(tmp_path / "out" / "sandbox").running()
    assert _recover(tmp_path).stdout.startswith("nothing to recover")


@pytest.mark.parametrize(
    "fault",
    [
        "{at: 2s, kind: host-kill, select: primary, duration: 60s}",
        "{at: 2s, kind: host-freeze, select: secondary, duration: 60s}",
    ],
    ids=["host-kill", "host-freeze"],
)
def test_recover_after_the_runner_is_killed(tmp_path: Path, fault: str) -> None:
    experiment = _experiment(tmp_path, fault, keep=True)
    proc = _start(tmp_path, experiment)
    _wait_for_text(proc, "injected", 60)
    proc.kill()
    proc.wait(timeout=30)
    sandbox = Sandbox(tmp_path / "out" / "sandbox")
    try:
        assert any(s.state in ("DOWN", "STOPPED") for s in sandbox.status())
        dry = _recover(tmp_path, "--dry-run")
        assert dry.returncode == 0 and "would" in dry.stdout
        assert any(s.state in ("DOWN", "STOPPED") for s in sandbox.status())  # dry: no change
        done = _recover(tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        # keep: true, so the sandbox stays up for inspection: every member running and healthy.
        deadline = time.monotonic() + 30
        while any(s.state not in ("PRIMARY", "SECONDARY") for s in sandbox.status()):
            assert time.monotonic() < deadline, sandbox.status()
            time.sleep(0.2)
        assert _recover(tmp_path).stdout.startswith("nothing to recover")
    finally:
        sandbox.down()


def test_recover_stops_the_sandbox_of_a_dead_run(tmp_path: Path) -> None:
    experiment = _experiment(tmp_path, "{at: 2s, kind: host-kill, select: primary, duration: 60s}")
    proc = _start(tmp_path, experiment, out="out")  # relative, and recover runs elsewhere
    _wait_for_text(proc, "injected", 60)
    proc.kill()
    proc.wait(timeout=30)
    pids = _member_pids(tmp_path / "out" / "sandbox")
    assert any(_alive(p) for p in pids)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = _recover(tmp_path, cwd=elsewhere)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not any(_alive(p) for p in _member_pids(tmp_path / "out" / "sandbox") + pids)


def test_metrics_file_holds_what_result_json_measured(tmp_path: Path) -> None:
    """--metrics-file: the run's figures for node-exporter, the same numbers as result.json."""
    from prometheus_client.parser import text_string_to_metric_families

    experiment = _experiment(tmp_path, "{at: 1s, kind: stepdown, duration: 5s, "
                                       "secondary_catch_up: 5s}")  # fmt: skip
    experiment.write_text(experiment.read_text().replace("after_revert: 10s", "after_revert: 3s")
                          + "slo: {write_unavailable_s: '<= 60'}\n")  # fmt: skip
    prom = tmp_path / "textfile" / "rsdrill.prom"
    proc = _start(tmp_path, experiment, "--metrics-file", str(prom))
    out, _ = proc.communicate(timeout=180)
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    assert proc.returncode == result["exit_code"], out
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(prom.read_text())
        for s in family.samples
    }
    labels = (("experiment", "cli-test"), ("faults", "stepdown"), ("platform", "sandbox"),
              ("topology", "rs3"))  # fmt: skip
    write_gap = result["metrics"]["write_unavailable_s"]
    assert write_gap is not None
    assert samples[("rsdrill_write_unavailable_seconds", labels)] == pytest.approx(write_gap)
    assert samples[("rsdrill_run_exit_code", labels)] == result["exit_code"]
    assert samples[("rsdrill_run_duration_seconds", labels)] == pytest.approx(result["duration_s"])
    assert samples[("rsdrill_slo_passed", (*labels[:2], ("platform", "sandbox"),
                    ("slo", "write_unavailable_s <= 60"), ("topology", "rs3")))] == 1  # fmt: skip
    # the verdict line's figure is rounded as the reports round it (to the millisecond)
    assert re.search(r"ok   write_unavailable_s <= 60 \(observed \d+(\.\d{1,3})?\)", out), out


# A process whose history spilled to disk: prints the spill's directory, then lives until its
# standard input closes.
_SPILLER = """
import sys
from rsdrill.history import FLUSH_OPS, History
from rsdrill.op import Op
history = History.from_ops(Op("write", "insert", None, i, i + 0.01, "ok", {"seq": i})
                           for i in range(FLUSH_OPS + 1))
print(history._spill._dir, flush=True)
sys.stdin.read()
"""


def test_recover_removes_the_history_a_killed_run_spilled_and_no_live_ones(
    tmp_path: Path,
) -> None:
    """A run killed outright (SIGKILL: nothing of its own runs) leaves the probe attempts it
    had spilled to disk, gigabytes after hours; `rsdrill recover` removes them, and leaves a
    live process's spill alone (gone once that process ends)."""
    env = {**os.environ, "RSDRILL_HOME": str(tmp_path / "home")}

    def spiller() -> tuple[subprocess.Popen[str], Path]:
        process = subprocess.Popen([sys.executable, "-c", _SPILLER], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, text=True, env=env)  # fmt: skip
        assert process.stdout is not None
        directory = Path(process.stdout.readline().strip())
        assert directory.parent == tmp_path / "home" / "spill" and any(directory.iterdir())
        return process, directory

    killed, left = spiller()
    killed.kill()
    killed.wait()
    alive, kept = spiller()
    try:
        dry = _recover(tmp_path, "--dry-run")
        assert f"would remove the history a dead run (pid {killed.pid})" in dry.stdout
        assert left.exists()
        done = _recover(tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"removed the history a dead run (pid {killed.pid}) spilled" in done.stdout
        assert not left.exists() and kept.exists()
        assert _recover(tmp_path).stdout.startswith("nothing to recover")
    finally:
        alive.communicate("", timeout=30)
    assert not kept.exists()
