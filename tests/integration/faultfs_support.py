"""Helpers for tests on a real faultfs mount (fixtures: `faultfs_fixtures.py`)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from rsdrill.faultfs.control import request
from rsdrill.faultfs.mount import Mount

ROOT = Path(__file__).resolve().parents[2]


def ensure_faultfs_tools() -> None:
    """Install libfuse3/fusermount3/mfusepy if missing; fail loudly (never skip) if that fails."""
    done = subprocess.run(
        ["bash", str(ROOT / ".ci" / "install-faultfs")], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.fail(f".ci/install-faultfs failed: {done.stderr.strip() or done.stdout.strip()}")


def set_rule(m: Mount, name: str, **rule: Any) -> dict[str, Any]:
    return request(m.mountpoint, {"op": "set", "name": name, "rule": rule})
