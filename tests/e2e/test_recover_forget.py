"""`rsdrill recover --forget KEY` as an operator uses it: a killed run's fail point on a member
that no longer answers (SIGSTOPped: a timeout, not a refused connection) stays owed and
recover exits 4 on every call, naming the key; forgetting it journals who gave it up, reverts
nothing, and recover is green again. Against the sandbox's emulator member processes."""

from __future__ import annotations

import getpass
import json
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

from rsdrill.sandbox.cluster import Sandbox
from tests.e2e.test_run_cli import _recover, _start, _wait_for_text
from tests.integration.test_revert_member_down import FAILED_CODE, _ping_code


def start_kept_rs3(
    tmp_path: Path, port_base: int, name: str, faults: list[str]
) -> tuple[subprocess.Popen[str], Sandbox]:
    """A run of `faults` (flow mappings) on an rs3 sandbox it keeps up, and that sandbox."""
    path = tmp_path / "exp.yaml"
    path.write_text(
        f"name: {name}\n"
        f"target: {{platform: sandbox, topology: rs3, keep: true, port_base: {port_base}}}\n"
        "faults:\n" + "".join(f"  - {fault}\n" for fault in faults)
    )
    return _start(tmp_path, path), Sandbox(tmp_path / "out" / "sandbox")


def test_a_revert_whose_member_never_answers_can_be_forgotten(
    tmp_path: Path, free_port_base: Callable[[int], int]
) -> None:
    proc, sandbox = start_kept_rs3(tmp_path, free_port_base(3), "forget-test", [
        "{at: 1s, kind: mongodb-fail-command, select: secondary, commands: [ping], "
        f"error_code: {FAILED_CODE}, duration: 120s}}"
    ])  # fmt: skip
    member = None
    try:
        _wait_for_text(proc, "injected mongodb-fail-command", 90)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        (journal,) = (tmp_path / "home" / "journal").glob("*.jsonl")
        (intent,) = [r for r in map(json.loads, journal.read_text().splitlines())
                     if r["type"] == "intent"]  # fmt: skip
        key, host = intent["key"], intent["target"]
        member = next(m for m in sandbox.spec.members if m.host == host)
        sandbox.stop(member)  # gone for good, as far as anyone can tell: it never answers

        failed = _recover(tmp_path, timeout=90)
        assert failed.returncode == 4, failed.stdout + failed.stderr
        assert f"FAILED [{key}] {host}: failCommand may still be on" in failed.stderr
        assert f"rsdrill recover --forget {key}" in failed.stderr
        dry = _recover(tmp_path, "--dry-run")
        assert f"  [{key}] would fail-command-off (host={host})" in dry.stdout.splitlines()

        before = journal.read_bytes()
        typo = _recover(tmp_path, "--forget", "fault:7:nowhere:1")
        assert typo.returncode == 2 and typo.stdout == ""
        assert typo.stderr.splitlines() == [
            f"--forget fault:7:nowhere:1: no such revert owed; owed: {key} (run {journal.stem})"
        ]
        would = _recover(tmp_path, "--forget", key, "--dry-run")
        assert would.returncode == 0, would.stdout + would.stderr
        assert f"would forget [{key}] fail-command-off (host={host})" in would.stdout
        assert journal.read_bytes() == before  # neither refusal nor dry run wrote anything

        forgot = _recover(tmp_path, "--forget", key, timeout=30)
        assert forgot.returncode == 0, forgot.stdout + forgot.stderr
        assert f"forgot [{key}] fail-command-off (host={host}): not reverted" in forgot.stdout
        records = [json.loads(line) for line in journal.read_text().splitlines()]
        (given_up,) = [r for r in records if r["type"] == "forgotten"]
        assert given_up["key"] == key and given_up["at"]
        assert given_up["by"].startswith(f"{getpass.getuser()}@")
        assert records[-1] == {**records[-1], "type": "end", "verdict": "forgotten"}
        assert any(r["type"] == "intent" for r in records)  # given up, not deleted

        # The nightly pipeline's `rsdrill recover` is green again, and so is a second forget.
        again = _recover(tmp_path, timeout=30)
        assert again.returncode == 0 and again.stdout.startswith("nothing to recover")
        twice = _recover(tmp_path, "--forget", key)
        assert twice.returncode == 0, twice.stdout + twice.stderr
        assert f"already forgotten by {given_up['by']}" in twice.stdout

        # Forget only: nothing was reverted, the member still holds the fail point.
        sandbox.cont(member)
        member = None
        assert _ping_code(host, sandbox.connect_options) == FAILED_CODE
    finally:
        if proc.poll() is None:
            proc.kill()
        if member is not None:
            sandbox.cont(member)
        sandbox.down()
