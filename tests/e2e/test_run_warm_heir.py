"""The warm half of test_run_cold_cache.py: a stepdown onto a secondary that was not restarted
(its cache holds the working set it wrote while replicating the preload), its volume capped as
the cold one's, leaves reads fast. Timing figures: bench/cold_cache.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.cold_cache import stepdown_onto

pytest_plugins = ["tests.integration.faultfs_fixtures"]
pytestmark = pytest.mark.usefixtures("no_faultfs_mount_left")


@pytest.mark.slow
def test_stepdown_onto_a_warm_secondary_does_not_degrade_reads(tmp_path: Path) -> None:
    warm = stepdown_onto(tmp_path, cold=False)
    # None (the bench measured 0), give or take a window step or two on a loaded machine.
    assert warm.degraded_s <= 1.0, warm
