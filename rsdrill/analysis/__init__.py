"""Analyzers: pure functions from a run's history and fault timeline to metrics and a verdict.

No I/O, no clock, no randomness: the same history always gives the same numbers.
"""

from rsdrill.analysis.metrics import compute_metrics
from rsdrill.analysis.slo import evaluate, verdict

__all__ = ["compute_metrics", "evaluate", "verdict"]
