"""The second half (`--split 2/2`) of pymongo's change-stream suite against a fresh rs3 sandbox:
test_change_stream_conformance.py runs the first and says what the suite covers."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conformance.test_change_stream_conformance import EXPECTED_CHANGE_STREAMS
from tests.conformance.test_spec_conformance import no_regression


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_no_change_stream_spec_test_of_the_second_half_that_passed_fails_now(
    tmp_path: Path, free_port_base: Callable[[int], int]
) -> None:
    no_regression(("change_streams",), EXPECTED_CHANGE_STREAMS, tmp_path, free_port_base(3),
                  split="2/2")  # fmt: skip
