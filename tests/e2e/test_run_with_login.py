"""`rsdrill run` against a set that requires a login: every probe and guard logs in (the
status-based ones too), and the password appears in no output."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.harness.cli import rsdrill_run

EXPERIMENT = """\
name: login-kill
target: {platform: sandbox, topology: rs3, election_timeout: 1s, auth: true, keep: true}
probes:
  lag: {interval: 200ms}
faults:
  - {at: 3s, kind: host-kill, select: primary, duration: 3s}
observe: {after_revert: 20s}
slo:
  lost_acknowledged_writes: "== 0"
"""


@pytest.mark.slow
def test_a_run_logs_in_everywhere_and_leaks_no_password(tmp_path: Path) -> None:
    experiment = tmp_path / "exp.yaml"
    experiment.write_text(EXPERIMENT)
    out, home = tmp_path / "out", tmp_path / "home"
    done = rsdrill_run(
        ["run", str(experiment), "--out", str(out),
         "--no-live", "--no-history"],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "RSDRILL_HOME": str(home)},
    )  # fmt: skip
    sandbox = out / "sandbox"
    try:
        assert done.returncode == 0, done.stdout + done.stderr
        password = json.loads((sandbox / "auth.json").read_text())["password"]
        result = json.loads((out / "result.json").read_text())
        metrics = result["metrics"]
        # The URI reached the result with its password masked; the login is stated.
        assert "rsdrill:***@" in result["target"]["uri"], result["target"]["uri"]
        assert result["target"]["server"]["auth_mechanism"] == "SCRAM-SHA-256"  # as negotiated
        # replSetGetStatus needs the login: the recovery and lag probes and the guards got in.
        assert metrics["recovery_s"] and all(v is not None for v in metrics["recovery_s"].values())
        assert metrics["replication_lag_max_s"] is not None
        assert metrics["failover_s"] is not None and metrics["acknowledged_writes"] > 0
        assert "guard member health: ok" in done.stdout + done.stderr
        outputs = [
            p
            for p in out.rglob("*")
            if p.is_file()
            and p.name != "auth.json"
            and p.suffix in (".json", ".jsonl", ".xml", ".html", ".md", ".log")
        ]
        outputs += list(home.rglob("*.jsonl"))  # the journal
        for path in outputs:
            assert password not in path.read_text(errors="replace"), path
        assert password not in done.stdout + done.stderr
    finally:
        rsdrill_run(["sandbox", "down", "--dir",
                        str(sandbox)], capture_output=True, timeout=60)  # fmt: skip
