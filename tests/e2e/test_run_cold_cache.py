"""Parse's cold secondary on the sandbox (experiments/seeds/parse-cold-secondary.yaml): a
stepdown onto a secondary restarted with an empty page cache, its volume capped, keeps reads slow
until the working set is read back; onto a warm secondary it does not (test_run_warm_heir.py).
Timing figures: bench/cold_cache.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.cold_cache import stepdown_onto

pytest_plugins = ["tests.integration.faultfs_fixtures"]
pytestmark = pytest.mark.usefixtures("no_faultfs_mount_left")


@pytest.mark.slow
def test_stepdown_onto_a_cold_secondary_degrades_reads(tmp_path: Path) -> None:
    cold, slowed = stepdown_onto(tmp_path, cold=True)
    # The heir read its working set (4 MB: 256 pages of 16 KB) back through the cap...
    assert slowed >= 100, (slowed, cold)
    # ...and its typical read stayed slow meanwhile (the bench: 3-5 s).
    assert cold.degraded_s >= 2.0, (slowed, cold)
