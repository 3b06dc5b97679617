"""A run's SIGINT/SIGTERM handler runs on the main thread between two of its bytecodes, holding
whatever lock that thread held: it must stop the run without waiting on any."""

from __future__ import annotations

import os
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
    os.close(runner._signal_fd)  # its watcher ends, as `run` ends it


def test_a_run_that_cannot_begin_gives_the_signals_back(tmp_path: Path) -> None:
    # Its journal cannot be opened (a file where its directory should be): the run raises, and
    # Ctrl-C must stop the caller again (a pytest session, a sweep), not a run that is over.
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    options = RunOptions(out_dir=tmp_path / "out", live=False, journal_dir=blocker / "journal")
    runner, threads = Runner(Experiment.model_validate(SPEC), options), set(threading.enumerate())
    try:
        runner.run()
    except OSError:
        pass
    else:
        raise AssertionError("the journal was opened inside a file")
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    watchers = [t for t in set(threading.enumerate()) - threads if t.name == "rsdrill-signals"]
    for watcher in watchers:
        watcher.join(5)
    assert not any(t.is_alive() for t in watchers), "the signal watcher outlived the run"
