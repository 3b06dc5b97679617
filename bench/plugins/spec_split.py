"""A pytest plugin that bench/spec_conformance.py's `--split K/N` hands pymongo's harness: of the
tests collected, only those of part K of N run, so that N runs (each on its own sandbox, in
parallel test workers) share one suite. The parts come from a hash of each test's node id, not
from collection order, so that the bench can tell which tests of its expected list are its own
without collecting."""

from __future__ import annotations

import os
import zlib

import pytest

ENV = "RSDRILL_SPEC_SPLIT"


def part_of(node_id: str, parts: int) -> int:
    """The part (1 to `parts`) the test with this node id belongs to."""
    return zlib.crc32(node_id.encode()) % parts + 1


def parse(split: str) -> tuple[int, int]:
    """`K/N` → (K, N); ValueError unless 1 <= K <= N."""
    part, parts = (int(n) for n in split.split("/"))
    if not 1 <= part <= parts:
        raise ValueError(f"{split}: not K/N with 1 <= K <= N")
    return part, parts


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    split = os.environ.get(ENV)
    if not split:
        return
    part, parts = parse(split)
    others = [item for item in items if part_of(item.nodeid, parts) != part]
    if others:
        config.hook.pytest_deselected(items=others)
        items[:] = [item for item in items if part_of(item.nodeid, parts) == part]
