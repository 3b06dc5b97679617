"""pymongo's connection-pool (CMAP), read/write concern and command-monitoring suites against
fresh rs3 sandboxes: every test in expected_protocol_rs3.txt passed in three runs in a row when
it was recorded (`python bench/spec_conformance.py --suites <PROTOCOL_SUITES> --jobs 1
--write-expected ...`). A pool is cleared on a network error or a state change, a write
concern that cannot be met is a writeConcernError, a refused statement a write error: what a
client sees of a server under faults."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conformance.test_spec_conformance import no_regression

PROTOCOL_SUITES = ("connection_monitoring", "read_write_concern", "command_monitoring")
EXPECTED_PROTOCOL = Path(__file__).with_name("expected_protocol_rs3.txt")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_no_protocol_spec_test_that_passed_fails_now(
    tmp_path: Path, free_port_base: Callable[[int], int]
) -> None:
    no_regression(
        PROTOCOL_SUITES, EXPECTED_PROTOCOL, tmp_path, free_port_base(3 * len(PROTOCOL_SUITES))
    )
