"""The environment copied while another thread changes it (pytest does, between two tests)."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator

import pytest

from rsdrill.environ import environ_copy

KEY = "RSDRILL_TEST_TOGGLED"


@pytest.fixture
def toggled() -> Iterator[None]:
    """A key set and deleted over and over by another thread, the GIL switching every
    microsecond: a plain dict(os.environ) then raised KeyError in about one copy in five."""
    stop = threading.Event()

    def toggle() -> None:
        while not stop.is_set():
            os.environ[KEY] = "1"
            del os.environ[KEY]

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    thread = threading.Thread(target=toggle)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(interval)
        os.environ.pop(KEY, None)


def test_a_copy_never_meets_a_key_deleted_meanwhile(toggled: None) -> None:
    copies = [environ_copy() for _ in range(2000)]
    assert all(copy["PATH"] == os.environ["PATH"] for copy in copies)
