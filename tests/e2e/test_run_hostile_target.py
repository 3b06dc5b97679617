"""`rsdrill run` against members that are not MongoDB and misbehave (tests/hostile_servers.py):
the run's checks refuse it within a deadline (exit 2: an unreachable target), each member named
with what went wrong, no traceback, nothing built or injected."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from hostile_servers import hostile_servers

from tests.harness.cli import rsdrill_run

# The checks ask every member `hello` at once with a 5 s deadline; the rest is start-up.
DEADLINE_S = 30.0


@pytest.mark.parametrize(
    "kinds", [("silent", "garbage", "reset"), ("silent",), ("garbage",), ("reset",), ("drip",)]
)
def test_run_against_hostile_members_is_refused_in_time(
    tmp_path: Path, kinds: tuple[str, ...]
) -> None:
    with hostile_servers(*kinds) as hosts:
        members = ", ".join(f"{{host: '{h}', start: 'false'}}" for h in hosts)
        topology = "rs3" if len(hosts) == 3 else "rs1"
        experiment = tmp_path / "exp.yaml"
        experiment.write_text(
            "name: hostile\n"
            f"target: {{platform: local, topology: {topology}, members: [{members}],\n"
            f"         uri: 'mongodb://{','.join(hosts)}/?replicaSet=hostile'}}\n"
            "faults:\n  - {at: 1s, kind: host-freeze, select: primary, duration: 1s}\n"
            "guards: {allow_quorum_loss: true}\n"
            "observe: {after_revert: 1s}\n"
        )
        started = time.monotonic()
        proc = rsdrill_run(
            ["run", str(experiment), "--yes",
             "--out", str(tmp_path / "out"), "--no-live", "--no-history"],
            capture_output=True, text=True, timeout=DEADLINE_S + 30,
            env={**os.environ, "RSDRILL_HOME": str(tmp_path / "home"),
                 "RSDRILL_ALLOW": "hostile"},
        )  # fmt: skip
        took = time.monotonic() - started
    output = proc.stdout + proc.stderr
    assert took < DEADLINE_S, (took, output)
    assert proc.returncode == 2, output
    assert "Traceback" not in output
    assert "check failed, nothing was injected" in output
    for host in hosts:
        assert f"✘ reach {host}: " in output, output
    assert not (tmp_path / "out").exists()
    journal = tmp_path / "home" / "journal"
    assert not journal.exists() or not any(journal.iterdir())
