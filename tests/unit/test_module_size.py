"""Small modules (docs/architecture.md): no module of rsdrill over 700 lines, none of the
emulator over 600. A module that grows past it is split by what it does, as the runner's result
helpers, options and audit step were."""

from __future__ import annotations

from pathlib import Path

import pytest

import rsdrill
import rsdrill_emulator

BOUNDS = {Path(rsdrill.__file__).parent: 700, Path(rsdrill_emulator.__file__).parent: 600}


@pytest.mark.parametrize("package", list(BOUNDS), ids=lambda p: p.name)
def test_no_module_is_over_its_package_s_bound(package: Path) -> None:
    bound = BOUNDS[package]
    sizes = {p.relative_to(package).as_posix(): len(p.read_text().splitlines())
             for p in package.rglob("*.py")}  # fmt: skip
    assert len(sizes) > 10, sizes  # the package really was read
    over = {name: lines for name, lines in sizes.items() if lines > bound}
    assert not over, f"over {bound} lines, split by what they do: {over}"
