"""The user's own steady-state checks: per check, the longest window without a healthy sample
and how many samples failed."""

from __future__ import annotations

from collections.abc import Sequence

from rsdrill.analysis.availability import longest_gap
from rsdrill.history import CHECK_PREFIX, Op
from rsdrill.result import CheckFigures


def checks(ops: Sequence[Op]) -> dict[str, CheckFigures]:
    """`probe.<name>` of the result for every check that recorded a sample."""
    by_check: dict[str, list[Op]] = {}
    for op in ops:
        if op.probe.startswith(CHECK_PREFIX):
            by_check.setdefault(op.probe.removeprefix(CHECK_PREFIX), []).append(op)
    return {
        name: CheckFigures(
            unavailable_s=longest_gap(samples, lambda op: op.ok),
            failed_samples=sum(not op.ok for op in samples),
            samples=len(samples),
        )
        for name, samples in sorted(by_check.items())
    }
