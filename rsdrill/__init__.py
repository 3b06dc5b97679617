"""rsdrill: chaos experiments for MongoDB replica sets, with failover and recovery measured.

As a library::

    import rsdrill

    experiment = rsdrill.load("experiments/rs3-primary-kill.yaml")
    print(rsdrill.plan(experiment))
    result = rsdrill.run(experiment, out="results/rs3-primary-kill")
    assert result.metrics.write_unavailable_s is not None
    assert result.metrics.write_unavailable_s <= 15

Every error rsdrill raises on purpose is an `rsdrill.RsdrillError`; an invalid file is an
`rsdrill.ExperimentError` located at FILE:LINE:COL. Importing this package stays cheap (the
command line's `--help` does): the rest is imported when a function is called.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rsdrill.errors import GuardRefusal, InjectionError, RsdrillError, TargetError
from rsdrill.version import __version__

if TYPE_CHECKING:
    from rsdrill.engine.check import Check
    from rsdrill.experiment.loader import ExperimentError
    from rsdrill.experiment.schema import Experiment
    from rsdrill.result import Result

__all__ = [
    "Check",
    "Experiment",
    "ExperimentError",
    "GuardRefusal",
    "InjectionError",
    "Result",
    "RsdrillError",
    "TargetError",
    "__version__",
    "check",
    "load",
    "plan",
    "run",
]

# Exported names whose modules import pydantic: loaded on first use.
_LAZY = {
    "Check": "rsdrill.engine.check",
    "Experiment": "rsdrill.experiment.schema",
    "ExperimentError": "rsdrill.experiment.loader",
    "Result": "rsdrill.result",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'rsdrill' has no attribute {name!r}")


def load(path: str | PathLike[str], env: Mapping[str, str] | None = None) -> Experiment:
    """Read and validate an experiment file. `env` supplies `${VAR}` values (default: the
    process environment). Raises `ExperimentError` naming FILE:LINE:COL and the field."""
    from rsdrill.experiment.loader import load_experiment

    return load_experiment(Path(path), env)


def plan(experiment: Experiment) -> str:
    """What the experiment will do, to which member and when, as text (nothing is run)."""
    from rsdrill.experiment.plan import render_plan

    return render_plan(experiment)


def check(experiment: Experiment) -> list[Check]:
    """Check the target without breaking anything: reachability, version, topology,
    privileges, the platform's permissions, local tools. `Check.ok` is False for a failure."""
    from rsdrill.engine.check import check_experiment

    return check_experiment(experiment)


def run(
    experiment: Experiment,
    out: str | PathLike[str],
    *,
    journal_dir: str | PathLike[str] | None = None,
    assume_yes: bool = False,
    plugins: Sequence[object] = (),
    fleet: bool = True,
    lease_wait_s: float = 0.0,
) -> Result:
    """Carry the experiment out and return its result; result.json, junit.xml, report.html
    and the others are written to `out`. Every fault is reverted whatever happens; the
    verdict and exit code say how it went (`Result.verdict`, `Result.exit_code`).

    `journal_dir`: where the journal goes (default: ~/.rsdrill/journal, or
    $RSDRILL_HOME/journal); `assume_yes`: the allowlist guard's confirmation, given;
    `plugins`: objects or modules with `@rsdrill.hooks.hookimpl` functions that see this run's
    events (those of the `rsdrill.plugins` entry points see them anyway); `fleet`: go through
    the fleet's stop lever and the cluster's lease as `rsdrill run` does (the store as
    RSDRILL_FLEET or RSDRILL_HISTORY say, else this user's file: docs/fleet.md), waiting up to
    `lease_wait_s` for another run's cluster. Under an engaged lever the run does not start:
    verdict aborted, exit code 5. A fleet store or key that cannot be had raises, as does an
    `out` another live run is writing to (`OutDirBusy`) or a report that could not be written
    (`ReportError`, with the run's `result`). A SIGINT or SIGTERM stops the run (everything
    reverted, the reports written, verdict aborted) and is then raised again for the caller's
    own handling of it (KeyboardInterrupt, or the process's end).
    """
    import os
    import signal

    from rsdrill.engine.options import RunOptions
    from rsdrill.engine.outdir import claim
    from rsdrill.engine.runner import Runner
    from rsdrill.fleet.gate import open_gate
    from rsdrill.fleet.location import HISTORY_ENV

    claim(Path(out))  # another live run's results directory raises OutDirBusy
    gate = open_gate(experiment, os.environ.get(HISTORY_ENV), lease_wait_s) if fleet else None

    options = RunOptions(
        out_dir=Path(out),
        live=False,
        journal_dir=None if journal_dir is None else Path(journal_dir),
        assume_yes=assume_yes,
        plugins=tuple(plugins),
        gate=gate,
    )
    runner = Runner(experiment, options)
    try:
        result = runner.run()
    finally:
        if gate is not None:
            gate.store.close()
    if runner.signalled:
        # The run stopped for it, everything reverted; now the caller's own handling: a loop
        # of runs (a pytest session) went on breaking the set until the SIGKILL came.
        signal.raise_signal(signal.Signals[runner.signalled])
    return result
