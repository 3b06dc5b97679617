"""docs/architecture.md's layer diagram is the import contract lint-imports enforces
(pyproject.toml), not a copy of it that drifts as modules are added."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _contract_layers() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    (layers,) = [c["layers"] for c in contracts if c["type"] == "layers"]
    return [layer.replace("rsdrill.", "") for layer in layers]


def _documented_layers() -> list[str]:
    page = (ROOT / "docs" / "architecture.md").read_text()
    match = re.search(r"^## Layers\n.*?^```\n(.*?)^```", page, re.S | re.M)
    assert match, "docs/architecture.md has no diagram under '## Layers'"
    # A long layer wraps after a ':' (modules that may import each other).
    return re.sub(r":\n\s*", ": ", match.group(1).strip()).splitlines()


def test_the_documented_layers_are_the_enforced_ones() -> None:
    assert _documented_layers() == _contract_layers()
