"""Exceptions that cross layers: raised low (a platform, a guard) and handled by the runner
and the command line."""

from __future__ import annotations


class GuardRefusal(Exception):
    """A guard refused the run; nothing was injected."""

    def __init__(self, guard: str, reason: str) -> None:
        super().__init__(f"{guard} guard: {reason}")
        self.guard = guard
        self.reason = reason
