"""pymongo's change-stream suite (unified and prose tests: events, resume tokens, resumable
errors, pre- and post-images, expanded events) against a fresh rs3 sandbox: every test in
expected_change_streams_rs3.txt passed in three runs in a row when it was recorded
(`python bench/spec_conformance.py --suites change_streams --write-expected ...`). This file
runs half of the suite (`--split 1/2`), test_change_stream_conformance_2.py the other half: two
xdist workers take one each."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conformance.test_spec_conformance import no_regression

EXPECTED_CHANGE_STREAMS = Path(__file__).with_name("expected_change_streams_rs3.txt")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_no_change_stream_spec_test_of_the_first_half_that_passed_fails_now(
    tmp_path: Path, free_port_base: Callable[[int], int]
) -> None:
    no_regression(("change_streams",), EXPECTED_CHANGE_STREAMS, tmp_path, free_port_base(3),
                  split="1/2")  # fmt: skip
