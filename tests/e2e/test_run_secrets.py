"""Secrets never leave rsdrill: a run whose URI holds a password (from the environment) and
whose environment holds a cloud secret writes neither to any file or output stream.

The set has no such user, so the login fails and the run's checks refuse it (exit 2): the error
path, where a driver message quoting the URI is most likely to leak, is the one scanned here.
The writers themselves are fed the raw URI in tests/unit/test_redact_outputs.py, and a run
that logs in writes the redacted URI to result.json in tests/e2e/test_run_with_login.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from tests.e2e.local_set import local_target, set_uri
from tests.harness.cli import rsdrill_run

PASSWORD = "S3cretPassw0rd"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


def test_no_output_holds_the_password_or_the_cloud_secret(
    tmp_path: Path, existing_set: Path
) -> None:
    uri = set_uri(existing_set, "drill:${DRILL_PASSWORD}@") + "&authSource=admin"
    experiment = tmp_path / "exp.yaml"
    experiment.write_text(
        yaml.safe_dump(
            {
                "name": "secrets",
                "target": local_target(existing_set, uri),
                "faults": [
                    {"at": "1s", "kind": "host-freeze", "select": "secondary", "duration": "1s"}
                ],
                "observe": {"after_revert": "1s"},
            }
        )
    )
    home, out = tmp_path / "home", tmp_path / "out"
    proc = rsdrill_run(
        ["run", str(experiment), "--yes",
         "--out", str(out), "--no-live", "--history", str(tmp_path / "history.sqlite")],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "RSDRILL_HOME": str(home), "RSDRILL_ALLOW": "rs0",
             "DRILL_PASSWORD": PASSWORD, "AWS_SECRET_ACCESS_KEY": AWS_SECRET},
    )  # fmt: skip
    streams = proc.stdout + proc.stderr
    # The login failed, said at once and plainly (the members are not "down").
    assert proc.returncode == 2 and "login as drill failed: Authentication failed." in streams, (
        streams
    )
    files = [p for p in tmp_path.rglob("*") if p.is_file() and p.name != "exp.yaml"]
    for secret in (PASSWORD, AWS_SECRET):
        assert secret not in streams
        leaks = [p for p in files if secret.encode() in p.read_bytes()]
        assert not leaks, (secret, leaks)
