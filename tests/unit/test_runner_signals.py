"""A run's SIGINT/SIGTERM handler runs on the main thread between two of its bytecodes, holding
whatever lock that thread held: it must stop the run without waiting on any."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

from rsdrill.engine.options import RunOptions
from rsdrill.engine.runner import Runner
from rsdrill.experiment.schema import Experiment

SPEC = {
    "name": "signals",
    "target": {"platform": "sandbox", "topology": "rs3"},
    "faults": [{"at": "1s", "kind": "stepdown", "select": "primary"}],
}


def test_a_signal_taken_as_the_run_begins_a_wait_still_stops_it(tmp_path: Path) -> None:
    # As `_sleep` enters `_wake.wait()` its thread holds `_wake`'s lock for a few bytecodes; a
    # handler that set `_wake` itself waited for that lock forever (CI: a run sent SIGTERM just
    # after "injected host-kill" printed the stop and then hung, its fault never reverted).
    runner = Runner(Experiment.model_validate(SPEC), RunOptions(out_dir=tmp_path, live=False))
    runner._watch_signals()
    returned = threading.Event()

    def main_thread_interrupted() -> None:
        with runner._wake._cond:  # type: ignore[attr-defined]
            runner._on_signal(signal.SIGTERM, None)
        returned.set()

    threading.Thread(target=main_thread_interrupted, daemon=True).start()
    assert returned.wait(5), "the handler waited on a lock its own thread held"
    assert runner._abort.wait(5) and runner._wake.wait(5), "the run was not stopped"
    assert runner.signalled == "SIGTERM"
