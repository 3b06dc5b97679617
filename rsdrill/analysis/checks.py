"""The user's own steady-state checks: per check, the longest window without a healthy sample
and how many samples failed."""

from __future__ import annotations

from collections.abc import Sequence

from rsdrill.analysis.availability import longest_gap
from rsdrill.history import CHECK_PREFIX, Op, of_probes, probe_counts
from rsdrill.result import CheckFigures


def checks(ops: Sequence[Op]) -> dict[str, CheckFigures]:
    """`probe.<name>` of the result for every check that recorded a sample."""
    names = sorted(p for p in probe_counts(ops) if p.startswith(CHECK_PREFIX))
    by_check = {name.removeprefix(CHECK_PREFIX): of_probes(ops, name) for name in names}
    return {
        name: CheckFigures(
            unavailable_s=longest_gap(samples, lambda op: op.ok),
            failed_samples=sum(not op.ok for op in samples),
            samples=len(samples),
        )
        for name, samples in sorted(by_check.items())
    }
