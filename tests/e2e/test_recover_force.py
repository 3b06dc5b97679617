"""`rsdrill recover --force` on a run that is still alive (here SIGSTOPped, as a hung run or
one in another pid namespace looks): recover reverts what it owes and ends its journal; the
run, once it goes on, injects nothing more and reverts what it had. Against the sandbox's
emulator member processes."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from pathlib import Path

from tests.e2e.test_recover_forget import start_kept_rs3
from tests.e2e.test_run_cli import _recover, _wait_for_text
from tests.integration.test_revert_member_down import FAILED_CODE, _ping_code


def test_a_run_whose_journal_recover_forced_injects_nothing_more(
    tmp_path: Path, free_port_base: Callable[[int], int]
) -> None:
    fault = (f"kind: mongodb-fail-command, commands: [ping], error_code: {FAILED_CODE}, "
             "duration: 60s")  # fmt: skip
    proc, sandbox = start_kept_rs3(tmp_path, free_port_base(3), "force-test", [
        f"{{at: 1s, select: secondary, {fault}}}", f"{{at: 4s, select: primary, {fault}}}"
    ])  # fmt: skip
    stopped = False
    try:
        _wait_for_text(proc, "injected mongodb-fail-command", 90)
        proc.send_signal(signal.SIGSTOP)
        stopped = True
        (journal,) = (tmp_path / "home" / "journal").glob("*.jsonl")
        first = _recover(tmp_path)  # the run is alive: passed by without --force
        assert "--force" in first.stdout + first.stderr
        forced = _recover(tmp_path, "--force", timeout=60)
        assert forced.returncode == 0, forced.stdout + forced.stderr
        assert [r["type"] for r in map(json.loads, journal.read_text().splitlines())][-1] == "end"

        proc.send_signal(signal.SIGCONT)
        stopped = False
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode != 0, out
        assert "finished by `rsdrill recover --force`" in out
        records = [json.loads(line) for line in journal.read_text().splitlines()]
        # The second fault was never journaled, so never put in force ...
        assert not [r for r in records if r["type"] == "intent" and r["key"].startswith("fault:1:")]
        # ... and no member fails a ping: the first fault is reverted, the second never came.
        for member in sandbox.spec.members:
            assert _ping_code(member.host, sandbox.connect_options) is None, member.host
        assert _recover(tmp_path).stdout.startswith("nothing to recover")
    finally:
        if stopped:
            proc.send_signal(signal.SIGCONT)
        if proc.poll() is None:
            proc.kill()
        sandbox.down()
