"""pymongo's SDAM suites (discovery and monitoring, its events, the streaming protocol,
heartbeats, connections surviving a stepdown, server selection in the latency window) against
fresh rs3 sandboxes: every test in expected_sdam_rs3.txt passed in three runs in a row when it
was recorded (`python bench/spec_conformance.py --suites <SDAM_SUITES> --write-expected ...`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conformance.test_spec_conformance import no_regression

SDAM_SUITES = ("sdam", "sdam_monitoring", "streaming_protocol", "heartbeat_monitoring",
               "survive_stepdown", "server_selection")  # fmt: skip
EXPECTED_SDAM = Path(__file__).with_name("expected_sdam_rs3.txt")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_no_sdam_spec_test_that_passed_fails_now(
    tmp_path: Path, free_port_base: Callable[[int], int]
) -> None:
    no_regression(SDAM_SUITES, EXPECTED_SDAM, tmp_path, free_port_base(3 * len(SDAM_SUITES)))
