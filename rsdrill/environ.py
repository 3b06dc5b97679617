"""This process's environment copied whole, from any thread."""

from __future__ import annotations

import os


def environ_copy() -> dict[str, str]:
    """os.environ as a dict. Copying it reads the keys, then each value: a key another thread
    deletes meanwhile raises KeyError (pytest deletes PYTEST_CURRENT_TEST between two tests
    while a run's threads start members); copied again, the key is simply gone."""
    while True:
        try:
            return dict(os.environ)
        except KeyError:
            continue
