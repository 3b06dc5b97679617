"""Did-you-mean suggestions for names a user misspelt (keys, values, metrics)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(given: str, choices: Iterable[str]) -> str | None:
    """The closest of `choices` to `given`, ignoring case, if any is close enough."""
    by_lower = {c.lower(): c for c in choices}
    close = difflib.get_close_matches(given.lower(), list(by_lower), n=1, cutoff=0.6)
    return by_lower[close[0]] if close else None
