"""A results directory belongs to one run at a time.

Two nightly jobs started at once with the same `--out` wrote their reports over each other, and
the second was told its sandbox was "already running" with advice to stop the first's. Two
started within the same second shared the default `rsdrill-results/<experiment>-<time>`.
A run holds its directory with flock on the directory itself: no lock file is left, and a
killed run holds nothing.
"""

from __future__ import annotations

import fcntl
import itertools
import os
from contextlib import suppress
from pathlib import Path

from rsdrill.errors import RsdrillError
from rsdrill.report import REPORT_FILES

_HELD: dict[Path, int] = {}  # held until this process ends (-1: a filesystem without locks)


class OutDirBusy(RsdrillError):
    """Another live process is writing its results into the directory."""


def claim(path: Path) -> Path:
    """Make `path` and hold it for this process; `OutDirBusy` when another process holds it.
    A filesystem that cannot lock (NFS without its lock manager) is used unlocked. An earlier
    run's reports there are removed: this run killed outright, CI published them as its own."""
    path.mkdir(parents=True, exist_ok=True)
    key = path.resolve()
    if key in _HELD:
        return path
    fd = os.open(key, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise OutDirBusy(
            f"{path}: another rsdrill run is writing its results there; give each run its own --out"
        ) from None
    except OSError:
        os.close(fd)
        fd = -1
    _HELD[key] = fd
    for name in REPORT_FILES.values():
        with suppress(OSError):  # one that cannot go is found when this run's is written
            (path / name).unlink(missing_ok=True)
    return path


def claim_new(path: Path) -> Path:
    """A directory of this run's own: `path` when it does not exist yet, else `path-2`, ..."""
    for n in itertools.count(1):
        candidate = path if n == 1 else path.with_name(f"{path.name}-{n}")
        try:
            candidate.mkdir(parents=True)
        except FileExistsError:
            continue
        return claim(candidate)
    raise AssertionError("unreachable")
