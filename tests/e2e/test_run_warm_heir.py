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
    warm, slowed = stepdown_onto(tmp_path, cold=False)
    # Its cache held the working set: no read waited for the cap...
    assert slowed == 0, (slowed, warm)
    # ...and none degraded (the bench measured 0), give or take a window step or two.
    assert warm.degraded_s <= 1.0, (slowed, warm)
