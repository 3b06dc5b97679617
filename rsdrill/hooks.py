"""The run's events, as pluggy hooks: the extension seam for outputs and integrations.

A plugin is a module or object with functions marked `@hookimpl` named as the specs below. It
is registered through the `rsdrill.plugins` entry-point group (as pytest plugins and Chaos
Toolkit extensions are), or handed to the run (`RunOptions.plugins`). The report writers
(result.json, junit.xml, report.html, summary.md, history.jsonl) are such a plugin
(`rsdrill/report/plugin.py`), so a new output is a plugin, not an edit of the runner.

Events come in this order: `rsdrill_run_started`, then `rsdrill_phase` for each phase, with
`rsdrill_fault_applied` / `rsdrill_fault_reverted` as faults come and go, then `rsdrill_verdict`
and `rsdrill_run_finished`. A plugin that raises is logged (logger `rsdrill.hooks`) and does not
change the run.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from rsdrill.history import FaultRecord, Op
    from rsdrill.result import Result

PROJECT = "rsdrill"
GROUP = "rsdrill.plugins"
"""The entry-point group plugins register under."""
PROBE_GROUP = "rsdrill.probes"
"""The entry-point group of the user's own steady-state checks (`probes.checks.<name>.plugin`)."""

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


class RunEvents:
    """The hook specifications of a run (each called with keyword arguments)."""

    @hookspec
    def rsdrill_run_started(self, experiment: str, run_id: str, out_dir: Path) -> None:
        """The run of experiment `experiment` starts; its outputs go to `out_dir`."""

    @hookspec
    def rsdrill_phase(self, name: str) -> None:
        """A phase begins: setup, preflight, guards, faults, observe, revert, analyze,
        teardown."""

    @hookspec
    def rsdrill_fault_applied(self, fault: FaultRecord) -> None:
        """A fault was injected (and confirmed, unless it could not be)."""

    @hookspec
    def rsdrill_fault_reverted(self, fault: FaultRecord) -> None:
        """A fault was reverted (`fault.reverted_at_s` is set)."""

    @hookspec
    def rsdrill_verdict(self, result: Result) -> None:
        """The run is judged: `result` is final."""

    @hookspec
    def rsdrill_run_finished(self, result: Result, ops: Sequence[Op], out_dir: Path) -> None:
        """Everything is reverted and judged: write outputs (`ops`: every probe attempt)."""
