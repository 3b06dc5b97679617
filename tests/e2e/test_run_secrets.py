"""Secrets never leave rsdrill: a run whose URI holds a password (from the environment) and
whose environment holds a cloud secret writes neither to any file or output stream.

The emulator has no authentication (no saslStart), so pymongo's login fails and the run ends
in error: the error path, where a driver message quoting the URI is most likely to leak, is
the one scanned here. The writers themselves are fed the raw URI in
tests/unit/test_redact_outputs.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rsdrill.sandbox.cluster import EmulatorEngine, Sandbox, up
from rsdrill.sandbox.config import ReplSetSpec, Settings, build_topology, member_dir
from rsdrill.targets.local import listening_pid

PASSWORD = "S3cretPassw0rd"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


@pytest.fixture
def replset_dir(tmp_path: Path, free_port_base: Callable[[int], int]) -> Iterator[Path]:
    """A running rs3 started outside the run (stopped afterwards, whatever happened)."""
    directory = tmp_path / "existing"
    spec = build_topology(
        "rs3", port_base=free_port_base(3), settings=Settings(election_timeout_ms=1000)
    )
    up(directory, spec, EmulatorEngine())
    yield directory
    Sandbox(directory).down(grace_s=2.0)
    for member in spec.members:
        pid = listening_pid(member.port)
        if pid is not None:
            os.kill(pid, signal.SIGKILL)


def test_no_output_holds_the_password_or_the_cloud_secret(
    tmp_path: Path, replset_dir: Path
) -> None:
    spec = ReplSetSpec.read(replset_dir)
    members = "".join(
        f"    - host: {m.host}\n"
        f"      start: {sys.executable} -m rsdrill.sandbox.emulator --dir {replset_dir} "
        f"--host {m.host}\n"
        f"      dbpath: {member_dir(replset_dir, m) / 'data'}\n"
        for m in spec.members
    )
    hosts = ",".join(m.host for m in spec.members)
    experiment = tmp_path / "exp.yaml"
    experiment.write_text(
        "name: secrets\n"
        "target:\n  platform: local\n  topology: rs3\n"
        f"  uri: mongodb://drill:${{DRILL_PASSWORD}}@{hosts}/?replicaSet=rs0&authSource=admin\n"
        f"  members:\n{members}"
        "faults:\n  - {at: 1s, kind: host-freeze, select: secondary, duration: 1s}\n"
        "observe: {after_revert: 1s}\n"
    )
    home, out = tmp_path / "home", tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "rsdrill.cli.app", "run", str(experiment), "--yes",
         "--out", str(out), "--no-live", "--history", str(tmp_path / "history.sqlite")],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "RSDRILL_HOME": str(home), "RSDRILL_ALLOW": "rs0",
             "DRILL_PASSWORD": PASSWORD, "AWS_SECRET_ACCESS_KEY": AWS_SECRET},
    )  # fmt: skip
    streams = proc.stdout + proc.stderr
    # The login failed, said at once and plainly (the members are not "down").
    assert proc.returncode == 4 and "login as drill failed: Authentication failed." in streams, (
        streams
    )
    # The URI did reach the result, redacted.
    assert "drill:***@" in (out / "result.json").read_text()
    files = [p for d in (out, home, tmp_path / "history.sqlite") for p in
             ([d] if d.is_file() else d.rglob("*")) if p.is_file()]  # fmt: skip
    assert any(p.name == "result.json" for p in files) and any(p.suffix == ".jsonl" for p in files)
    for secret in (PASSWORD, AWS_SECRET):
        assert secret not in streams
        leaks = [p for p in files if secret.encode() in p.read_bytes()]
        assert not leaks, (secret, leaks)
