"""rsdrill's own directory on this machine: $RSDRILL_HOME, else ~/.rsdrill (the journal, the
fleet's file)."""

from __future__ import annotations

import os
from pathlib import Path


def rsdrill_home() -> Path:
    return Path(os.environ.get("RSDRILL_HOME", Path.home() / ".rsdrill"))
