"""Analyzers: pure functions from a run's history and fault timeline to metrics and a verdict.

No I/O, no clock, no randomness: the same history always gives the same numbers.
"""
