"""`mongodb-fail-command` on the sandbox: the named commands fail with the code while the fail
point is on and succeed once it is off, as the probes see it; after a SIGKILLed run,
`rsdrill recover` turns the fail point off."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import pytest
import yaml
from pymongo import MongoClient
from pymongo.errors import OperationFailure

from rsdrill.engine.options import RunOptions
from rsdrill.engine.runner import run_experiment
from rsdrill.experiment.loader import load_experiment
from rsdrill.sandbox.cluster import Sandbox
from tests.e2e.test_run_cli import _recover, _start, _wait_for_text

EXPERIMENT = Path(__file__).resolve().parents[2] / "experiments" / "primary-fail-command.yaml"


def test_named_commands_fail_with_the_code_then_succeed(
    tmp_path: Path, free_port_base: Callable[[int], int]
) -> None:
    document = yaml.safe_load(EXPERIMENT.read_text())
    document["target"]["port_base"] = free_port_base(3)
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(document))
    result = run_experiment(load_experiment(path), RunOptions(out_dir=tmp_path / "out", live=False))
    assert result.verdict == "pass", result.error
    (fault,) = result.faults
    assert fault.verified_at_s is not None and fault.reverted_at_s is not None
    assert fault.injected_at_s is not None
    lines = (tmp_path / "out" / "history.jsonl").read_text().splitlines()
    ops = [json.loads(line) for line in lines]
    writes = [o for o in ops if o["probe"] == "write"]
    # Sent after the fail point was on and answered before it went off: each failed with 6.
    # injected_at_s is stamped before the injection begins (connecting to the primary and
    # setting the fail point take a while on a busy machine); once verified, it is on.
    on, off = fault.verified_at_s, fault.reverted_at_s
    inside = [o for o in writes if o["t_start"] > on and o["t_end"] < off]
    assert len(inside) > 20
    assert {(o["outcome"], o["detail"].get("code")) for o in inside} == {("error", 6)}
    after = [o for o in writes if o["t_start"] > fault.reverted_at_s + 0.05]
    before = [o for o in writes if o["t_end"] < fault.injected_at_s]
    assert after and before
    assert all(o["outcome"] == "ok" for o in before + after)
    # Only inserts fail: the reads went on throughout.
    reads = [o for o in ops if o["probe"] == "read"]
    assert reads and all(o["outcome"] == "ok" for o in reads)
    assert result.metrics.write_unavailable_s == pytest.approx(3.0, abs=0.6)


def _insert_code(uri: str) -> int | None:
    """The error code of one insert on the primary (None: it succeeded)."""
    with MongoClient(uri, serverSelectionTimeoutMS=10_000, retryWrites=False) as client:
        try:
            client.rsdrill_test.failpoint.insert_one({})
        except OperationFailure as exc:
            return exc.code
    return None


@pytest.mark.parametrize("security", ["", "tls: true, auth: x509, ", "tls: true, auth: scram, "])
def test_recover_turns_the_fail_point_of_a_killed_run_off(
    tmp_path: Path, free_port_base: Callable[[int], int], security: str
) -> None:
    """Also over TLS: the journal keeps the TLS settings (a member that will not talk plain is
    not a member down, as recover once concluded, leaving the fail point on), never a password:
    a SCRAM set's fail point needs the connection string again, and says so."""
    path = tmp_path / "exp.yaml"
    path.write_text(
        "name: fail-command-killed\n"
        f"target: {{platform: sandbox, topology: rs3, keep: true, {security}"
        f"port_base: {free_port_base(3)}}}\n"
        "faults:\n  - {at: 1s, kind: mongodb-fail-command, select: primary, "
        "commands: [insert], error_code: 8, duration: 120s}\n"
    )
    out = tmp_path / "out"
    proc = _start(tmp_path, path)
    sandbox = Sandbox(out / "sandbox")
    try:
        _wait_for_text(proc, "injected mongodb-fail-command", 90)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        assert _insert_code(sandbox.uri) == 8  # left on by the killed run
        journal = next((tmp_path / "home").rglob("*.jsonl")).read_text()
        login = sandbox.credentials
        assert login is None or not login.password or login.password not in journal
        if "scram" in security:
            refused = _recover(tmp_path, timeout=60)
            assert refused.returncode == 4, refused.stdout + refused.stderr
            assert "failCommand may still be on" in refused.stderr, refused.stderr
            assert "rsdrill recover --uri" in refused.stderr
            assert _insert_code(sandbox.uri) == 8  # still on, and still owed
            # A wrong password is a login refused, not a member down: still on, still owed.
            assert login is not None and login.password
            wrong = sandbox.uri.replace(f":{quote(login.password, safe='')}@", ":wrong-pw@")
            assert wrong != sandbox.uri
            refused = _recover(tmp_path, "--uri", wrong, timeout=60)
            assert refused.returncode == 4, refused.stdout + refused.stderr
            assert "failCommand may still be on" in refused.stderr, refused.stderr
            assert "wrong-pw" not in refused.stdout + refused.stderr
            assert _insert_code(sandbox.uri) == 8
            recover = _recover(tmp_path, "--uri", sandbox.uri, timeout=60)
        else:
            recover = _recover(tmp_path, timeout=60)
        assert recover.returncode == 0, recover.stdout + recover.stderr
        assert "failCommand off" in recover.stdout, recover.stdout
        assert _insert_code(sandbox.uri) is None
    finally:
        if proc.poll() is None:
            proc.kill()
        sandbox.down()
