"""The safety net holds for any exception: a revert that raises something rsdrill does not know
(a KeyError of its own, a driver's error, a cloud SDK's) costs neither the other reverts, nor
the teardown, nor the result, nor the signal handlers; the fault it could not undo stays in the
journal for `rsdrill recover`."""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from pymongo.errors import OperationFailure

from rsdrill.engine import runner
from rsdrill.engine.journal import pending, read_records
from rsdrill.engine.options import RunOptions
from rsdrill.engine.runner import run_experiment
from rsdrill.experiment.schema import Experiment
from rsdrill.platforms.machine.local_hosts import listening_pid
from rsdrill.sandbox.cluster import Sandbox

ERRORS = [
    KeyError("a bug of rsdrill's own"),
    OperationFailure("not authorized on admin", code=13),
    ClientError({"Error": {"Code": "Throttling", "Message": "Rate exceeded"}}, "StartInstances"),
]


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: type(e).__name__)
def test_a_revert_raising_anything_leaves_the_rest_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: Exception
) -> None:
    build = runner._injector
    built: list[Any] = []

    def second_fails(*args: Any) -> Any:
        injector = build(*args)
        built.append(injector)
        if len(built) == 2:  # the later member: reverted first, and it raises

            def broken() -> None:
                raise error

            monkeypatch.setattr(injector, "revert", broken)
        return injector

    monkeypatch.setattr(runner, "_injector", second_fails)
    handlers = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
    # Both members frozen when the run is stopped: `_revert_all` undoes them, latest first.
    stop = threading.Timer(4.0, os.kill, (os.getpid(), signal.SIGTERM))
    stop.start()
    journals = tmp_path / "journal"
    try:
        result = run_experiment(
            Experiment.model_validate({
                "name": "safety-net",
                "target": {"platform": "sandbox", "topology": "rs3", "election_timeout": "1s"},
                "faults": [{"at": "1s", "kind": "host-freeze", "duration": "30s",
                            "select": {"count": 2, "role": "secondary"}}],
                "observe": {"after_revert": "1s"},
                "guards": {"allow_quorum_loss": True},
            }),
            RunOptions(out_dir=tmp_path / "out", live=False, journal_dir=journals),
        )  # fmt: skip
    finally:
        stop.cancel()
        # Should the net fail (as before it held), no member is left behind, frozen or not.
        Sandbox(tmp_path / "out" / "sandbox").down(grace_s=2.0)
    assert len(built) == 2
    # The run ends in error, saying which revert failed and that recover finishes it.
    assert (result.verdict, result.exit_code) == ("error", 4), result.error
    assert result.error is not None and "revert failed (run `rsdrill recover`)" in result.error
    assert type(error).__name__ in result.error
    saved = json.loads((tmp_path / "out" / "result.json").read_text())
    assert saved["verdict"] == "error"
    first, second = saved["faults"]
    # The other fault was reverted; the failed one is not claimed to be.
    assert first["reverted_at_s"] is not None and second["reverted_at_s"] is None, saved["faults"]
    # Torn down: the sandbox's members are gone (the frozen one too).
    ports = [int(member.rsplit(":", 1)[1]) for member in result.target.members]
    assert ports and all(listening_pid(port) is None for port in ports)
    # The journal keeps what `recover` still owes (the failed revert) and nothing else.
    (journal,) = journals.glob("*.jsonl")
    reverted = [r["key"] for r in read_records(journal) if r["type"] == "reverted"]
    assert reverted == ["fault:0:" + first["target"]], reverted
    (owed,) = pending(journals)
    assert [key for key, _ in owed.actions] == ["fault:0:" + second["target"]], owed.actions
    # The signal handlers are the caller's again.
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == handlers
