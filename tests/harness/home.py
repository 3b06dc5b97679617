"""The suite's rsdrill home (`RSDRILL_HOME`): a directory of each pytest process's own, not the
user's ~/.rsdrill. The suite's runs journal their faults, take fleet leases and spill histories
there: in the user's home they piled up (288 journals in a day on one machine), shared one
fleet file with the user's real runs, and a `rsdrill recover` run by the user would have read
every test's journal. Each xdist worker makes its own (set here in every process, so a worker
does not keep its controller's); a test that needs another sets it itself."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

_HOME = pytest.StashKey[Path]()


def pytest_configure(config: pytest.Config) -> None:
    home = Path(tempfile.mkdtemp(prefix="rsdrill-home-"))
    config.stash[_HOME] = home
    os.environ["RSDRILL_HOME"] = str(home)


def pytest_unconfigure(config: pytest.Config) -> None:
    home = config.stash.get(_HOME, None)
    if home is not None:
        shutil.rmtree(home, ignore_errors=True)
